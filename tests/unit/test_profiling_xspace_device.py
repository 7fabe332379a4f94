"""GPU planes read into device groups, from synthetic XSpaces built with TensorFlow's own ``xplane_pb2``.

The device plane is built as TensorFlow's CUPTI collector writes it
(``xla/backends/profiler/gpu/cupti_collector.cc``): a plane ``/device:GPU:N``,
one line per stream named ``Stream #N(Kernel)``, whose ``timestamp_ns`` is the
collection's start; one event per kernel, named by the kernel, with a
``tf_op`` stat (a reference to a stat metadata named by the op,
``scope/name:Type``) and a ``correlation_id`` stat; the driver's launch on the
host plane (``cuLaunchKernel``) carries the same ``correlation_id``. No GPU
has produced these here: they stand for the documented format.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_tfperf.profiling.attribution import attribute, explanation_lines
from pytest_tfperf.profiling import xspace as xs
from pytest_tfperf.profiling.profile_model import Group, Profile
from pytest_tfperf.profiling.xspace import ProfileUnavailable, summarise, summarise_sides
from tests.unit.test_profiling_xspace import US, Space, step_space, xplane_pb2

NS_BASE = 1_000  # the host lines' timestamp_ns in ``Space``


class GpuSpace(Space):
    """``Space`` with GPU planes: ``kernel(stream, name, start_us, duration_us, tf_op=..., launch_us=...)``."""

    def __init__(self) -> None:
        super().__init__()
        self.devices: dict[int, Any] = {}
        self.device_lines: dict[tuple[int, str], Any] = {}
        self.device_ids: dict[tuple[int, str], int] = {}
        self.device_stat_ids: dict[tuple[int, str], int] = {}
        self.correlation = 0

    def _device(self, gpu: int) -> Any:
        if gpu not in self.devices:
            plane = self.space.planes.add()
            plane.name = f"/device:GPU:{gpu}"
            plane.id = 1000 + gpu
            self.devices[gpu] = plane
        return self.devices[gpu]

    def _device_meta(self, gpu: int, name: str) -> int:
        plane = self._device(gpu)
        if (gpu, name) not in self.device_ids:
            mid = len(plane.event_metadata) + 1
            self.device_ids[(gpu, name)] = mid
            plane.event_metadata[mid].id = mid
            plane.event_metadata[mid].name = name
        return self.device_ids[(gpu, name)]

    def _device_stat(self, gpu: int, name: str) -> int:
        plane = self._device(gpu)
        if (gpu, name) not in self.device_stat_ids:
            sid = len(plane.stat_metadata) + 1
            self.device_stat_ids[(gpu, name)] = sid
            plane.stat_metadata[sid].id = sid
            plane.stat_metadata[sid].name = name
        return self.device_stat_ids[(gpu, name)]

    def device_line(self, gpu: int, name: str, timestamp_ns: int = 500) -> Any:
        """A line of the GPU plane; ``timestamp_ns`` differs from the host lines' as in real profiles."""
        if (gpu, name) not in self.device_lines:
            line = self._device(gpu).lines.add()
            line.name = name
            line.id = len(self.device_lines) + 7
            line.timestamp_ns = timestamp_ns
            self.device_lines[(gpu, name)] = line
        return self.device_lines[(gpu, name)]

    def kernel(self, stream: int, name: str, start_us: float, duration_us: float, *, tf_op: str | None = None,
               launch_us: float | None = None, gpu: int = 0, line_name: str | None = None) -> None:
        line = self.device_line(gpu, line_name or f"Stream #{stream}(Kernel)")
        ev = line.events.add()
        ev.metadata_id = self._device_meta(gpu, name)
        # the event's time is absolute (ns since the epoch in real profiles): the same instant as the host's
        ev.offset_ps = int(start_us * US) + (NS_BASE - line.timestamp_ns) * 1000
        ev.duration_ps = int(duration_us * US)
        if tf_op is not None:
            stat = ev.stats.add()
            stat.metadata_id = self._device_stat(gpu, "tf_op")
            stat.ref_value = self._device_stat(gpu, tf_op)
        if launch_us is not None:
            self.correlation += 1
            stat = ev.stats.add()
            stat.metadata_id = self._device_stat(gpu, "correlation_id")
            stat.uint64_value = self.correlation
            self.event("python", "cuLaunchKernel", launch_us, 2, correlation_id=self.correlation)


CONV_OPS = ("functional_1/planted_conv_1/Relu:_FusedConv2D",
            "gradient_tape/functional_1/planted_conv_1/convolution/Conv2DBackpropFilter:Conv2DBackpropFilter")


def gpu_space(windows: int = 4, iterations: int = 2, conv_us: float = 100.0, dense_us: float = 60.0,
              conv_ops: tuple[str, ...] = CONV_OPS, launch: bool = True, host_us: float = 0.0) -> GpuSpace:
    """Each iteration: the host launches (short op events); the GPU runs the conv's forward and backward kernels
    (two types, one layer) and a dense layer's matmul between them, on one stream (TensorFlow's one compute
stream per GPU). An iteration lasts as long as
    the longer of the kernels and ``host_us`` of host work (a ``py_function``): the windows' wall time is set
    by whichever is the bottleneck, as on a real step that waits for its result."""
    s = GpuSpace()
    step = 50 + 1.02 * max(3 * conv_us + dense_us + 20, host_us)
    length = iterations * step + 20
    s.windows(windows, length)
    for w in range(windows):
        for i in range(iterations):
            t = w * length + i * step + 10
            s.event("python", "EagerExecute", t, 30)
            if host_us:
                s.event("tf_Compute/2", "functional_1/prep_1/PyFunc:EagerPyFunc", t + 12, host_us)
            s.event("tf_Compute/1", conv_ops[0], t + 2, 5)  # the launch: a few microseconds on the host
            s.event("tf_Compute/1", "functional_1/dense_1/MatMul:MatMul", t + 8, 4)
            jitter = 1 + 0.01 * ((w + i) % 3)
            s.kernel(7, "volta_scudnn_128x64_relu_interior_nn", t + 20, conv_us * jitter, tf_op=conv_ops[0],
                     launch_us=t + 2 if launch else None)
            s.kernel(7, "ampere_sgemm_32x32_sliced1x4_nn", t + 25 + conv_us * jitter, dense_us * jitter,
                     tf_op="functional_1/dense_1/MatMul:MatMul", launch_us=t + 8 if launch else None)
            s.kernel(7, "void cudnn::wgrad_alg0_engine<float, 128, 6, 8, 3, 3, 5, false, 512>",
                     t + 30 + (conv_us + dense_us) * jitter, 2 * conv_us * jitter, tf_op=conv_ops[1],
                     launch_us=t + 3 if launch else None)
    return s


def test_kernel_time_per_iteration_is_grouped_by_the_layer_that_launched_it_across_op_types() -> None:
    profile = summarise(gpu_space().parsed(), name="step", iterations=2)
    conv = profile.group("device:layer:functional/planted_conv")
    assert conv is not None and conv.kind == "device layer" and conv.on_device
    assert conv.label == "planted_conv kernels" and set(conv.families) == {"Conv2D"}
    assert conv.describe() == "planted_conv kernels (Conv2D family)"
    # per window: forward 100 us and backward 200 us a call (with 0-2% jitter), 2 calls, per iteration ~300 us
    assert conv.per_window == pytest.approx((300e-6,) * 4, rel=0.03)
    dense = profile.group("device:layer:functional/dense")
    assert dense is not None and dense.mean == pytest.approx(60e-6, rel=0.03)
    # the host's groups are the launches, as without a GPU; they are not the device's
    host = profile.group("layer:functional/planted_conv")
    assert host is not None and host.mean == pytest.approx(5e-6) and not host.on_device
    assert profile.device_busy == pytest.approx((360e-6,) * 4, rel=0.03)
    assert profile.device_other == (0.0,) * 4


def test_a_kernel_belongs_to_the_window_of_its_launch_even_when_it_runs_after_the_window() -> None:
    s = GpuSpace()
    s.windows(2, 1000.0)
    s.event("tf_Compute/1", "m/late/MatMul:MatMul", 900, 5)
    s.kernel(7, "sgemm", 1150, 400, tf_op="m/late/MatMul:MatMul", launch_us=900)  # runs in window 1's time
    s.kernel(7, "sgemm", 1600, 100, tf_op="m/late/MatMul:MatMul")  # no launch found: where it starts
    profile = summarise(s.parsed(), name="late", iterations=1)
    late = profile.group("device:layer:m/late")
    assert late is not None and late.per_window == pytest.approx((400e-6, 100e-6))


def test_device_events_outside_every_window_are_left_out() -> None:
    s = gpu_space(windows=2)
    s.kernel(7, "sgemm", 5_000, 900, tf_op="m/outside/MatMul:MatMul", launch_us=5_000)  # after the last window
    s.kernel(7, "sgemm", -800, 700, tf_op="m/outside/MatMul:MatMul")  # before the first
    profile = summarise(s.parsed(), name="step", iterations=2)
    assert profile.group("device:layer:m/outside") is None
    assert profile.device_busy == pytest.approx((360e-6,) * 2, rel=0.03)


def test_only_stream_lines_are_read_so_derived_lines_do_not_count_twice() -> None:
    s = gpu_space(windows=2)
    # xprof's derived line repeats the kernels' ops; a CUPTI overhead line is not a stream either
    s.kernel(0, "functional_1/planted_conv_1/Relu", 10, 990, tf_op=CONV_OPS[0], line_name="TensorFlow Ops")
    s.kernel(0, "overhead", 10, 990, line_name="CUPTI overhead")
    profile = summarise(s.parsed(), name="step", iterations=2)
    conv = profile.group("device:layer:functional/planted_conv")
    assert conv is not None and conv.mean == pytest.approx(300e-6, rel=0.03)
    assert profile.group("device:op:(none)") is None


def test_copies_and_kernels_without_an_op_are_groups_of_their_own() -> None:
    s = GpuSpace()
    s.windows(2, 1000.0)
    for w in range(2):
        s.kernel(9, "MemcpyH2D", w * 1000 + 10, 200, line_name="Stream #9(MemcpyH2D)")
        s.kernel(7, "cutlass_internal_kernel", w * 1000 + 300, 50)
        s.kernel(7, "Cast_GPU_DT_FLOAT", w * 1000 + 400, 20, tf_op="Cast:Cast")  # an eager op: no scope
    profile = summarise(s.parsed(), name="copies", iterations=1)
    copy = profile.group("device:op:MemcpyH2D")
    assert copy is not None and copy.label == "MemcpyH2D with no TensorFlow op" and copy.mean == pytest.approx(200e-6)
    none = profile.group("device:op:(none)")
    assert none is not None and none.label == "kernels with no TensorFlow op"
    cast = profile.group("device:op:Cast")
    assert cast is not None and cast.label == "Cast kernels outside layers"


def test_busy_time_is_the_union_over_streams_of_the_busiest_gpu() -> None:
    s = GpuSpace()
    s.windows(1, 1000.0)
    s.kernel(7, "sgemm", 10, 300, tf_op="m/a/MatMul:MatMul", gpu=0)
    s.kernel(8, "sgemm", 200, 200, tf_op="m/b/MatMul:MatMul", gpu=0)  # overlaps stream 7 by 100 us
    s.kernel(7, "sgemm", 10, 350, tf_op="m/a/MatMul:MatMul", gpu=1)
    profile = summarise(s.parsed(), name="two", iterations=1)
    a, b = profile.group("device:layer:m/a"), profile.group("device:layer:m/b")
    assert a is not None and a.mean == pytest.approx(650e-6)  # both GPUs' kernels of the layer
    assert b is not None and b.mean == pytest.approx(200e-6)
    assert profile.device_busy == pytest.approx((390e-6,))  # GPU 0: 10-400 us


def test_the_device_groups_beyond_the_top_go_to_the_devices_other() -> None:
    s = GpuSpace()
    s.windows(2, 1000.0)
    for w in range(2):
        for i in range(5):
            s.kernel(7, "k", w * 1000 + i * 100, 10 * (i + 1), tf_op=f"m/l{i}/MatMul:MatMul")
    profile = summarise(s.parsed(), name="many", iterations=1, max_device=3)
    device = [g for g in profile.groups if g.on_device]
    assert [g.key for g in device] == ["device:layer:m/l4", "device:layer:m/l3", "device:layer:m/l2"]
    assert profile.device_other == pytest.approx((30e-6, 30e-6))
    assert profile.other == (0.0, 0.0)  # the host's other holds no kernel time


def test_a_profile_without_device_planes_has_no_device_fields_and_is_stored_as_before() -> None:
    profile = summarise(step_space().parsed(), name="step", iterations=2)
    assert profile.device_busy == () and profile.device_other == () and not profile.has_device
    assert not any(g.on_device for g in profile.groups)
    data = profile.to_dict()
    assert data["version"] == 1 and "device_busy" not in data


def test_a_gpu_profile_with_the_most_groups_kept_stays_under_twenty_kb_stored() -> None:
    def group(i: int, kind: str, key: str) -> Group:
        stage = kind == "stage"
        return Group(key=f"{key}:functional/a_long_layer_name_{i}", kind=kind, label=f"a_long_layer_name_{i} kernels",
                     families=("Conv2D", "BiasAdd", "Relu"),
                     per_window=tuple(1.234567e-3 * (i + 1) + 1e-6 * w for w in range(6)),
                     per_element=1.2345e-4 if stage else None, parallel=True if stage else None)

    # as many as summarise keeps: top, max_stages, max_device
    groups = tuple(group(i, "layer", "layer") for i in range(30)) \
        + tuple(group(i, "stage", "stage") for i in range(20)) \
        + tuple(group(i, "device layer", "device:layer") for i in range(20))
    profile = Profile(name="t", iterations=10, wall=(0.01,) * 6, groups=groups, other=(1e-4,) * 6, smallest_kept=1e-3,
                      input_wait=(0.0,) * 6, elements=1.0, device_busy=(9e-3,) * 6, device_other=(1e-4,) * 6)
    assert len(json.dumps(profile.to_dict())) < 20_000


def test_a_gpu_profile_round_trips_through_its_stored_form() -> None:
    profile = summarise(gpu_space().parsed(), name="step", iterations=2)
    data = json.loads(json.dumps(profile.to_dict()))
    assert data["version"] == 2
    again = Profile.from_dict(data)
    assert again.device_busy == pytest.approx(profile.device_busy, abs=1e-7)
    assert again.group("device:layer:functional/planted_conv") is not None


def test_alternating_sides_split_the_kernels_by_the_window_of_their_launch() -> None:
    s = GpuSpace()
    for w, side in enumerate(("a", "b", "b", "a")):
        s.event("python", "tfperf_window", w * 1000, 1000, side=side)
        duration = 100 if side == "a" else 300
        s.kernel(7, "sgemm", w * 1000 + 900, duration, tf_op="m/x/MatMul:MatMul", launch_us=w * 1000 + 800)
    sides = summarise_sides(s.parsed(), iterations={"a": 1, "b": 1})
    a, b = sides["a"].group("device:layer:m/x"), sides["b"].group("device:layer:m/x")
    assert a is not None and b is not None
    assert a.per_window == pytest.approx((100e-6, 100e-6)) and b.per_window == pytest.approx((300e-6, 300e-6))


def test_a_planted_slower_kernel_names_its_layer_on_a_device_bound_step() -> None:
    base = summarise(gpu_space(windows=5).parsed(), name="base", iterations=2)
    slower = gpu_space(windows=5, dense_us=400.0)  # the dense layer's kernel got slower; its launch did not
    current = summarise(slower.parsed(), name="current", iterations=2)
    att = attribute(base, current, 350e-6)
    assert att.path == "device"
    assert att.top is not None and att.top.key == "device:layer:functional/dense"
    assert att.top.delta == pytest.approx(340e-6, rel=0.05)
    assert [c.key for c in att.causes] == ["device:layer:functional/dense"]
    # the host's launches did not move; the profiled pass's change is the kernel's, up to the jitter
    assert att.off_path == () and att.profiled == pytest.approx(att.top.delta, rel=0.05)
    assert math_close(att.explained + att.drift + att.remainder, att.profiled)
    lines = explanation_lines(att, unit="us")
    assert lines[2].startswith("  on the GPU: the device set the pace")
    assert lines[3].startswith("  dense kernels (MatMul family) grew +")
    assert any("GPU idle or streams overlapping" in line for line in lines)


def test_kernels_of_a_fused_or_renamed_op_fold_into_one_group_and_nothing_moves() -> None:
    base = summarise(gpu_space(windows=5).parsed(), name="base", iterations=2)
    renamed = ("functional_1/planted_conv_1/Conv2D:Conv2D",
               "gradient_tape/functional_1/planted_conv_1/Conv2DBackpropFilter:_MklNativeConv2DBackpropFilter")
    current = summarise(gpu_space(windows=5, conv_ops=renamed).parsed(), name="current", iterations=2)
    assert {g.key for g in base.groups} == {g.key for g in current.groups}
    att = attribute(base, current, 0.0)
    assert att.nothing_moved, explanation_lines(att)


def test_a_host_bound_gpu_step_is_explained_by_the_host_and_the_kernels_that_moved_are_listed_apart() -> None:
    # host work per iteration far above the kernels: the host sets the pace
    base_space = gpu_space(windows=5, conv_us=10.0, dense_us=6.0, host_us=350.0)
    current_space = gpu_space(windows=5, conv_us=10.0, dense_us=30.0, host_us=350.0)
    base = summarise(base_space.parsed(), name="base", iterations=2)
    current = summarise(current_space.parsed(), name="current", iterations=2)
    att = attribute(base, current, 24e-6)
    assert att.path == "host"
    assert [c.key for c in att.off_path] == ["device:layer:functional/dense"]
    assert all(not c.key.startswith("device:") for c in att.causes)
    lines = explanation_lines(att, unit="us")
    assert lines[2].startswith("  on the GPU: busy ")
    assert "  on the GPU too (kernels, overlapping the host: not added):" in lines
    assert att.top is not None


def test_an_old_host_only_stored_profile_compares_with_a_gpu_profile() -> None:
    old = Profile.from_dict(json.loads(json.dumps(summarise(step_space(windows=5).parsed(), name="b",
                                                            iterations=2).to_dict())))
    current = summarise(gpu_space(windows=5).parsed(), name="c", iterations=2)
    att = attribute(old, current, 1e-4)
    assert att.device_busy is None
    assert math_close(att.explained + att.drift + att.remainder, att.profiled)


def math_close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 + 1e-9 * abs(b)


def test_the_xplane_module_used_here_is_tensorflows() -> None:
    assert hasattr(xplane_pb2, "XSpace")


# -- memory: each device's allocator ---------------------------------------------------------------------------

def gpu_memory_space(gpu_bytes: int, cpu_bytes: int = 64 * 1024, windows: int = 3) -> Space:
    """Per window, a GPU layer's output in ``GPU_0_bfc`` and a host tensor in the CPU's allocator, both recorded on
    the host plane (where TensorFlow's allocators record their events, the GPU's too), and pinned host memory."""
    from tests.unit.test_profiling_memory import alloc, free

    s = Space()
    s.windows(windows, 1000)
    for w in range(windows):
        t = w * 1000.0
        for i in range(3):  # the GPU's allocator is the most active one, as on a GPU step
            alloc(s, "tf_Compute/1", t + 10 + i, gpu_bytes, 100 + w * 10 + i, f"functional_1/wide_1/MatMul_{i}",
                  allocator="GPU_0_bfc")
        alloc(s, "tf_Compute/2", t + 20, cpu_bytes, 200 + w * 10, "functional_1/prep_1/Cast",
              allocator="bfc_cpu_allocator_for_gpu")
        alloc(s, "tf_Compute/2", t + 25, 8 * 2**20, 300 + w * 10, "IteratorGetNext", allocator="gpu_host_bfc")
        for i in range(3):
            free(s, "tf_Compute/1", t + 900 + i, gpu_bytes, 100 + w * 10 + i, allocator="GPU_0_bfc")
        free(s, "tf_Compute/2", t + 910, cpu_bytes, 200 + w * 10, allocator="bfc_cpu_allocator_for_gpu")
        free(s, "tf_Compute/2", t + 920, 8 * 2**20, 300 + w * 10, allocator="gpu_host_bfc")
    return s


def test_each_devices_peak_is_read_from_its_own_allocator() -> None:
    from pytest_tfperf.profiling.memory_profile import read_memory

    space = gpu_memory_space(gpu_bytes=2**20).parsed()
    gpu = read_memory(space, device="GPU:0")
    assert gpu.allocator == "GPU_0_bfc" and gpu.peaks == (3 * 2**20,) * 3
    assert [g.key for g in gpu.groups] == ["layer:functional/wide"]
    cpu = read_memory(space, device="CPU:0")  # neither the GPU's allocator nor the GPU's pinned host memory
    assert cpu.allocator == "bfc_cpu_allocator_for_gpu" and cpu.peaks == (64 * 1024,) * 3
    assert read_memory(space).allocator == "GPU_0_bfc"  # no device named: the most active, as before
    with pytest.raises(ProfileUnavailable, match=r"no allocation events of GPU:1's allocator GPU_1_bfc \(allocators "
                                                 r"seen: GPU_0_bfc, bfc_cpu_allocator_for_gpu, gpu_host_bfc\)"):
        read_memory(space, device="GPU:1")


@pytest.fixture
def no_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Raw profiles read from files with this test's xplane_pb2: importing TensorFlow's would import TensorFlow."""
    monkeypatch.setattr(xs, "xplane_module", lambda: xplane_pb2)


def test_a_gpu_peak_regression_names_the_layer_that_allocated_on_the_gpu(tmp_path: Any, no_tensorflow: None) -> None:
    from pytest_tfperf.explain.explanation import explain_memory, tf_allocator_device

    for side, size in (("base", 2**20), ("current", 4 * 2**20)):
        folder = tmp_path / side / "plugins" / "profile" / "run"
        folder.mkdir(parents=True)
        (folder / "host.xplane.pb").write_bytes(gpu_memory_space(gpu_bytes=size).parsed().SerializeToString())
    device = tf_allocator_device("peak_tf_allocator[GPU:0]")
    assert device == "GPU:0" and tf_allocator_device("peak_rss") is None
    lines, data = explain_memory(tmp_path / "base", tmp_path / "current", 9 * 2**20, device=device)
    assert data["allocator"] == "GPU_0_bfc"
    assert lines[1].startswith("  wide grew +9.00 MiB at the peak")
    lines, data = explain_memory(tmp_path / "base", tmp_path / "current", 0.0, device="CPU:0")
    assert data["allocator"] == "bfc_cpu_allocator_for_gpu" and not data["causes"]


def test_a_stored_allocation_profile_of_another_allocator_is_not_compared(tmp_path: Any, no_tensorflow: None) -> None:
    from pytest_tfperf.profiling.memory_profile import memory_to_dict, read_memory
    from pytest_tfperf.explain.explanation import explain_memory

    stored = memory_to_dict(read_memory(gpu_memory_space(gpu_bytes=2**20).parsed(), device="CPU:0"))
    folder = tmp_path / "current" / "plugins" / "profile" / "run"
    folder.mkdir(parents=True)
    (folder / "host.xplane.pb").write_bytes(gpu_memory_space(gpu_bytes=2**20).parsed().SerializeToString())
    lines, data = explain_memory(None, tmp_path / "current", 2**20, stored=stored, device="GPU:0")
    assert lines == (data["lines"][0],) and "bfc_cpu_allocator_for_gpu's" in lines[0] and "GPU_0_bfc's" in lines[0]


def test_the_summary_headline_names_kernels_that_moved_off_a_host_bound_path() -> None:
    from pytest_tfperf.profiling.attribution import attribution_dict
    from pytest_tfperf.explain.explanation import Explanation

    base = summarise(gpu_space(windows=5, conv_us=10.0, dense_us=6.0, host_us=350.0).parsed(), name="b",
                     iterations=2)
    current = summarise(gpu_space(windows=5, conv_us=10.0, dense_us=30.0, host_us=350.0).parsed(), name="c",
                        iterations=2)
    data = attribution_dict(attribute(base, current, 24e-6))
    assert data["path"] == "host" and [c["key"] for c in data["off_path"]] == ["device:layer:functional/dense"]
    assert data["device_busy"]["delta_ms"] > 0
    headline = Explanation(lines=(), attribution=data).headline
    assert headline.startswith("dense kernels (MatMul family) grew +0.02 ms/iteration (not on the step's path)")
