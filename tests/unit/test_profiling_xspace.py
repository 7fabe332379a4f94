"""An XPlane profile read into groups: self time per iteration per window, built from synthetic XSpace protos.

The protos are built here with TensorFlow's own ``xplane_pb2`` (and go through
``ParseFromString`` once), so the reader sees the structure the profiler writes.
The module is loaded from its file in the TensorFlow install without importing
``tensorflow`` itself: collection would otherwise load TensorFlow into the test
process, and tests that fake TensorFlow's errors by class name would then see
the real package.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_tfperf.profiling import xspace as xs
from pytest_tfperf.profiling.xspace import ProfileUnavailable, load_xspace, summarise, summarise_sides


def _xplane_pb2() -> ModuleType:
    spec = importlib.util.find_spec("tensorflow")  # finds the package without importing it
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    path = Path(locations[0]) / "tsl" / "profiler" / "protobuf" / "xplane_pb2.py" if locations else None
    if path is None or not path.is_file():
        pytest.skip("needs TensorFlow's xplane_pb2 (tensorflow/tsl/profiler/protobuf)", allow_module_level=True)
    module_spec = importlib.util.spec_from_file_location("_tfperf_test_xplane_pb2", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


xplane_pb2 = _xplane_pb2()

US = 1_000_000  # picoseconds in a microsecond


class Space:
    """A host plane built event by event: ``event(line, name, start_us, duration_us, **stats)``."""

    def __init__(self) -> None:
        self.space = xplane_pb2.XSpace()
        self.plane = self.space.planes.add()
        self.plane.name = "/host:CPU"
        self.lines: dict[str, Any] = {}
        self.ids: dict[str, int] = {}
        self.stat_ids: dict[str, int] = {}

    def _meta(self, name: str) -> int:
        if name not in self.ids:
            mid = len(self.ids) + 1
            self.ids[name] = mid
            self.plane.event_metadata[mid].id = mid
            self.plane.event_metadata[mid].name = name
        return self.ids[name]

    def _stat(self, name: str) -> int:
        if name not in self.stat_ids:
            sid = len(self.stat_ids) + 1
            self.stat_ids[name] = sid
            self.plane.stat_metadata[sid].id = sid
            self.plane.stat_metadata[sid].name = name
        return self.stat_ids[name]

    def event(self, line: str, name: str, start_us: float, duration_us: float, **stats: Any) -> None:
        if line not in self.lines:
            new = self.plane.lines.add()
            new.name = line
            new.timestamp_ns = 1_000  # lines start at different times in real profiles: not at zero
            self.lines[line] = new
        ev = self.lines[line].events.add()
        ev.metadata_id = self._meta(name)
        ev.offset_ps = int(start_us * US)
        ev.duration_ps = int(duration_us * US)
        for key, value in stats.items():
            stat = ev.stats.add()
            stat.metadata_id = self._stat(key)
            if isinstance(value, str):  # as the profiler does: a reference to a stat metadata named by the value
                stat.ref_value = self._stat(value)
            else:
                stat.int64_value = value

    def windows(self, count: int, length_us: float) -> None:
        for w in range(count):
            self.event("python", xs.WINDOW_MARKER, w * length_us, length_us, step_num=w, _r=1)

    def parsed(self) -> Any:
        again = xplane_pb2.XSpace()
        again.ParseFromString(self.space.SerializeToString())
        return again


def step_space(windows: int = 3, iterations: int = 2, conv_us: float = 100.0) -> Space:
    """Each iteration: a layer's forward op (fused type) and its gradient (another type) under executor wrappers."""
    s = Space()
    length = 1000.0
    s.windows(windows, length)
    for w in range(windows):
        for i in range(iterations):
            t = w * length + i * 400 + 10
            s.event("python", "EagerExecute", t, 300)
            s.event("tf_Compute/1", "ExecutorState::Process", t + 5, 290)
            s.event("tf_Compute/1", "functional_1/planted_conv_1/Relu:_MklNativeFusedConv2D", t + 10, conv_us)
            s.event("tf_Compute/1", "ParallelFor", t + 20, 30)  # inside the op: the op's own time
            s.event("tf_Compute/1",
                    "gradient_tape/functional_1/planted_conv_1/convolution/Conv2DBackpropFilter:"
                    "_MklNativeConv2DBackpropFilter", t + 120, 2 * conv_us)
            s.event("tf_Compute/2", "MatMul:_MklMatMul", t + 10, 50)
    return s


def test_self_time_per_iteration_per_window_groups_a_layer_across_its_op_types() -> None:
    profile = summarise(step_space().parsed(), name="step", iterations=2)
    layer = profile.group("layer:functional/planted_conv")
    assert layer is not None and layer.kind == "layer" and layer.label == "planted_conv"
    assert layer.families == ("Conv2D",)
    # 100 us forward (ParallelFor inside it counts as the op's) + 200 us backward per iteration
    assert layer.per_window == pytest.approx((300e-6,) * 3)
    assert profile.group("op:MatMul").per_window == pytest.approx((50e-6,) * 3)
    # how long one traced op took: the forward (100 us) and the gradient (200 us) events, on average
    assert layer.per_event == pytest.approx(150e-6) and profile.group("op:MatMul").per_event == pytest.approx(50e-6)
    assert layer.events == 2.0 and profile.group("op:MatMul").events == 1.0  # traced op events an iteration
    assert profile.wall == pytest.approx((500e-6,) * 3)  # a 1000 us window of 2 iterations
    assert profile.windows == 3 and profile.elements == 0.0
    assert profile.groups[0].key == "layer:functional/planted_conv"  # largest first
    # the executor and eager wrappers are nobody's ops: unattributed, not a group
    assert all(not g.key.startswith(("op:Executor", "op:Eager")) for g in profile.groups)


def test_a_child_op_on_the_same_thread_is_taken_off_its_parent() -> None:
    s = Space()
    s.windows(1, 1000)
    s.event("tf_Compute/1", "outer/While:While", 10, 500)
    s.event("tf_Compute/1", "outer/MatMul:MatMul", 20, 200)
    profile = summarise(s.parsed(), name="nested", iterations=1)
    assert profile.group("layer:outer").per_window == pytest.approx((500e-6,))  # 300 self + 200 child, one layer
    s2 = Space()
    s2.windows(1, 1000)
    s2.event("tf_Compute/1", "While:While", 10, 500)
    s2.event("tf_Compute/1", "MatMul:MatMul", 20, 200)
    profile2 = summarise(s2.parsed(), name="nested", iterations=1)
    assert profile2.group("op:While").per_window == pytest.approx((300e-6,))
    assert profile2.group("op:MatMul").per_window == pytest.approx((200e-6,))


def test_events_outside_the_windows_are_left_out() -> None:
    s = step_space(windows=2)
    s.event("tf_Compute/1", "late/MatMul:MatMul", 5000, 999)  # after the last window
    profile = summarise(s.parsed(), name="step", iterations=2)
    assert profile.group("layer:late") is None


def test_a_pipeline_gives_stages_per_element_parallelism_and_the_consumers_wait() -> None:
    s = Space()
    s.windows(2, 1000)
    for w in range(2):
        for i in range(4):
            t = w * 1000 + i * 250
            # consumer: waits in GetNext for the prefetch (async: waiting, not work)
            s.event("python", "IteratorGetNextOp::DoCompute", t + 1, 200)
            s.event("python", "Iterator::Root::Prefetch", t + 2, 198)
            # the prefetch's producer pulls a sequential map over a generator
            s.event("tf_data_iterator_resource/1", "Iterator::Root::Prefetch::Map", t + 5, 180)
            s.event("tf_data_iterator_resource/1", "Iterator::Root::Prefetch::Map::FlatMap[0]::Generator",
                    t + 10, 120)
            s.event("tf_data_iterator_resource/1", "EagerPyFunc:EagerPyFunc", t + 20, 100)  # under the source
            s.event("tf_data_private_threadpool/7", "mul:Mul", t + 30, 40)  # a parallel function's op
    profile = summarise(s.parsed(), name="pipe", iterations=4)
    assert profile.elements == 1.0
    assert profile.input_wait == pytest.approx((200e-6, 200e-6))
    wait = profile.group("wait:input")
    assert wait.kind == "input wait" and wait.per_window == pytest.approx((200e-6,) * 2)
    source = profile.group("stage:Prefetch/Map/FlatMap/Generator")
    assert source.per_window == pytest.approx((120e-6,) * 2)  # 20 own + 100 of the py_function it runs
    assert source.per_element == pytest.approx(120e-6) and source.parallel is False
    assert profile.group("stage:Prefetch/Map").per_window == pytest.approx((60e-6,) * 2)
    work = profile.group("tfdata:Mul")
    assert work.kind == "tf.data work" and work.per_window == pytest.approx((40e-6,) * 2)
    assert profile.group("stage:Prefetch") is None  # the prefetch itself did no work the consumer did not wait for
    assert source.functions is None  # no function call linked to any stage: what the functions ran is unknown


def test_a_function_op_on_the_thread_pool_is_labelled_with_the_stage_whose_function_ran_it() -> None:
    # As TensorFlow records them: a parallel map's producer holds its input's event and the call (an id); a filter
    # calls its predicate inside its own event; the ops run on the pool under ExecutorState::Process with that id.
    s = Space()
    s.windows(2, 1000)
    for w in range(2):
        t = w * 1000
        s.event("tf_data_iterator_resource/1", "ParallelMapProduce", t + 10, 100)
        s.event("tf_data_iterator_resource/1", "Iterator::Root::Prefetch::Filter::ParallelMapV2::TensorSlice",
                t + 11, 5)
        s.event("tf_data_iterator_resource/1", "InstantiatedCapturedFunction::RunAsync", t + 20, 80, id=-(w + 7))
        s.event("tf_data_iterator_resource/1", "FunctionRun", t + 21, 70, id=-(w + 7), _p=5)
        s.event("tf_data_private_threadpool/2", "ExecutorState::Process", t + 30, 60, id=-(w + 7), _c=5)
        s.event("tf_data_private_threadpool/2", "resize/ResizeBilinear:ResizeBilinear", t + 31, 50)
        s.event("tf_data_iterator_resource/3", "Iterator::Root::Prefetch::Filter", t + 200, 300)
        s.event("tf_data_iterator_resource/3", "InstantiatedCapturedFunction::RunWithBorrowedArgs", t + 300, 150,
                id=w + 100)
        s.event("tf_data_private_threadpool/4", "ExecutorState::Process", t + 310, 100, id=w + 100)
        s.event("tf_data_private_threadpool/4", "reduce_std/sub:SquaredDifference", t + 311, 80)
        s.event("tf_data_private_threadpool/4", "cast:Cast", t + 500, 20)  # under no call
    profile = summarise(s.parsed(), name="pipe", iterations=1)
    resize = profile.group("tfdata:ResizeBilinear")  # the key is the family's, whatever stage ran it
    assert resize.label == "ResizeBilinear in the function of tf.data stage Prefetch/Filter/Map"
    assert resize.per_window == pytest.approx((50e-6,) * 2)
    assert profile.group("tfdata:SquaredDifference").label == \
        "SquaredDifference in the function of tf.data stage Prefetch/Filter"
    assert profile.group("tfdata:Cast").label == "Cast in tf.data functions"
    # each stage lists its own function's op families, what tells two maps apart when a pipeline changed shape
    assert profile.group("stage:Prefetch/Filter").functions == ("SquaredDifference",)
    assert profile.group("stage:Prefetch/Filter/Map/TensorSlice").functions == ()  # linked, and it ran none


def test_a_function_family_split_between_stages_names_the_one_that_ran_most_of_it() -> None:
    s = Space()
    s.windows(1, 1000)
    for stage, start, call, us in (("Map", 0, 1, 70), ("Map::Batch::Map", 300, 2, 30)):
        s.event("tf_data_iterator_resource/1", f"Iterator::Root::Prefetch::{stage}", start, 200)
        s.event("tf_data_iterator_resource/1", "InstantiatedCapturedFunction::RunWithBorrowedArgs", start + 1, 150,
                id=call)
        s.event("tf_data_private_threadpool/2", "ExecutorState::Process", start + 2, 100, id=call)
        s.event("tf_data_private_threadpool/2", "cast:Cast", start + 3, us)
    cast = summarise(s.parsed(), name="pipe", iterations=1).group("tfdata:Cast")
    assert cast.label == "Cast in tf.data functions, 70% of it in stage Prefetch/Map's"
    assert cast.per_window == pytest.approx((100e-6,))


def test_a_stage_seen_on_two_threads_is_parallel() -> None:
    s = Space()
    s.windows(1, 1000)
    s.event("tf_data_iterator_resource/1", "Iterator::Root::Prefetch::Map", 10, 100)
    s.event("tf_data_private_threadpool/2", "Iterator::Root::Prefetch::Map", 20, 100)
    s.event("tf_data_iterator_resource/1", "Iterator::Root::Prefetch::ParallelMapV2::Range", 300, 10)
    profile = summarise(s.parsed(), name="pipe", iterations=1)
    assert profile.group("stage:Prefetch/Map").parallel is True


def test_a_call_that_traced_is_retracing_with_what_it_ran_in_python() -> None:
    s = Space()
    s.windows(2, 1000)
    for w in range(2):
        t = w * 1000
        s.event("python", "train_step", t + 10, 600, tf_function_call="traced-nonXla", tracing_count=w + 2)
        s.event("python", "tf.function-graph_building", t + 20, 400)
        s.event("python", "EagerLocalExecute: __inference_train_step_41", t + 430, 100)
        s.event("python", "predict", t + 700, 100, tf_function_call="notTraced-nonXla")
    profile = summarise(s.parsed(), name="retrace", iterations=1)
    retrace = profile.group("retracing:train_step")
    assert retrace.kind == "retracing" and retrace.label == "retracing of train_step"
    assert retrace.per_window == pytest.approx((600e-6,) * 2)  # the whole traced call, wrappers included
    assert profile.group("retracing:predict") is None


def test_groups_beyond_the_top_go_to_other_and_the_smallest_kept_is_recorded() -> None:
    s = Space()
    s.windows(1, 10_000)
    for i in range(10):
        s.event("tf_Compute/1", f"model/layer{i}x/MatMul:MatMul", i * 500, 10 * (i + 1))
    profile = summarise(s.parsed(), name="many", iterations=1, top=3)
    assert [g.label for g in profile.groups] == ["layer9x", "layer8x", "layer7x"]
    assert profile.other == pytest.approx((sum(10 * (i + 1) for i in range(7)) * 1e-6,))
    assert profile.smallest_kept == pytest.approx(80e-6)


def test_no_host_plane_or_no_window_is_a_one_line_reason() -> None:
    empty = xplane_pb2.XSpace()
    empty.planes.add().name = "/device:GPU:0"
    with pytest.raises(ProfileUnavailable, match="no /host:CPU plane"):
        summarise(empty, name="x", iterations=1)
    s = Space()
    s.event("tf_Compute/1", "MatMul:MatMul", 10, 100)
    with pytest.raises(ProfileUnavailable, match="no 'tfperf_window' window"):
        summarise(s.parsed(), name="x", iterations=1)


def test_reading_past_the_deadline_stops_with_a_reason() -> None:
    s = Space()
    s.windows(1, 100_000)
    for i in range(10_000):
        s.event("tf_Compute/1", "MatMul:MatMul", i * 5, 2)
    with pytest.raises(ProfileUnavailable, match="longer than allowed"):
        summarise(s.parsed(), name="x", iterations=1, deadline=time.monotonic() - 1)


def test_a_profile_file_over_the_size_cap_is_refused_before_parsing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(step_space().space.SerializeToString())
    monkeypatch.setattr(xs, "xplane_module", lambda: xplane_pb2)  # the installed one would import TensorFlow
    assert load_xspace(path, max_bytes=10**9).planes[0].name == "/host:CPU"
    with pytest.raises(ProfileUnavailable, match="MiB, over the"):
        load_xspace(path, max_bytes=10)


def test_no_xplane_module_anywhere_names_the_places_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xs, "XPLANE_MODULES", ("no_such_module_a.xplane_pb2", "no_such_module_b.xplane_pb2"))
    with pytest.raises(ProfileUnavailable, match="no_such_module_a.xplane_pb2, no_such_module_b"):
        xs.xplane_module()


def test_alternating_windows_are_split_by_their_side_in_one_reading() -> None:
    s = Space()
    for w, side in enumerate(["base", "changed", "changed", "base"]):
        s.event("python", xs.WINDOW_MARKER, w * 1000, 1000, step_num=w // 2, _r=1, side=side)
        s.event("tf_Compute/1", "model/body/MatMul:_MklMatMul", w * 1000 + 10, 100)
        if side == "changed":
            s.event("tf_Compute/1", "model/planted/MatMul:MatMul", w * 1000 + 200, 400)
    sides = summarise_sides(s.parsed(), iterations={"base": 1, "changed": 2})
    base, changed = sides["base"], sides["changed"]
    assert base.windows == 2 and changed.windows == 2
    assert base.group("layer:model/planted") is None  # absent from the base's windows: absent from its profile
    assert changed.group("layer:model/planted").per_window == pytest.approx((200e-6,) * 2)  # 2 iterations a window
    assert base.group("layer:model/body").per_window == pytest.approx((100e-6,) * 2)
    assert summarise(s.parsed(), name="b", iterations=1, side="base").group("layer:model/planted") is None
    with pytest.raises(ProfileUnavailable, match="side 'other'"):
        summarise_sides(s.parsed(), iterations={"other": 1})


def test_a_stage_parallel_on_one_side_only_reads_sequential_on_the_other() -> None:
    s = Space()
    for w, (side, leaf) in enumerate([("base", "ParallelMapV2"), ("changed", "Map")]):
        s.event("python", xs.WINDOW_MARKER, w * 1000, 1000, side=side)
        s.event("tf_data_iterator_resource", f"Iterator::Root::Prefetch::{leaf}", w * 1000 + 10, 300)
    sides = summarise_sides(s.parsed(), iterations={"base": 1, "changed": 1})
    assert sides["base"].group("stage:Prefetch/Map").parallel is True
    assert sides["changed"].group("stage:Prefetch/Map").parallel is False


def test_a_pipeline_run_on_the_consumers_own_thread_is_its_stage_and_the_consumers_input_wait() -> None:
    # no prefetch: the consumer's GetNext runs the map itself, on the step's path
    s = Space()
    s.windows(1, 1000)
    for i in range(2):
        t = i * 500
        s.event("python", "IteratorGetNextOp::DoCompute", t + 1, 300)
        s.event("python", "Iterator::Root::Batch::Map", t + 10, 250)
        s.event("python", "EagerPyFunc:EagerPyFunc", t + 20, 200)  # the map's py_function: an op on the path
        s.event("python", "FunctionRun", t + 225, 30)  # the map function's wrapper: the stage's, so the wait's
    profile = summarise(s.parsed(), name="sync", iterations=2)
    stage = profile.group("stage:Batch/Map")
    assert stage.per_window == pytest.approx((50e-6,)) and stage.per_element == pytest.approx(50e-6)
    # the consumer's wait: its own 50 us in GetNext plus the 50 us of stage work it did itself
    assert profile.group("wait:input").per_window == pytest.approx((100e-6,))
    assert profile.group("op:PyFunc").per_window == pytest.approx((200e-6,))
