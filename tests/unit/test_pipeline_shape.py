"""Reading a tf.data pipeline's transformations from its objects: fakes named as TensorFlow 2.21 names them."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_tfperf.input_bound.pipeline_shape import PipelineShape, shape_of


def _node(cls_name: str, parent: object | None = None, **off: bool) -> object:
    optimisation = SimpleNamespace(map_parallelization=None, inject_prefetch=None, map_and_batch_fusion=None,
                                   parallel_batch=None)
    for name, value in off.items():
        setattr(optimisation, name, value)
    cls = type(cls_name, (), {
        "_inputs": lambda self: [parent] if parent is not None else [],
        "options": lambda self: SimpleNamespace(experimental_optimization=optimisation),
    })
    return cls()


def test_the_chain_reads_source_first_and_names_each_transformation() -> None:
    ds = _node("_RangeDataset")
    for name in ("CacheDataset", "_ShuffleDataset", "_ParallelMapDataset", "_BatchDataset", "_PrefetchDataset"):
        ds = _node(name, ds)
    shape = shape_of(ds)
    assert shape is not None
    assert shape.transformations == ("range", "cache", "shuffle", "parallel_map", "batch", "prefetch")
    assert shape.prefetches and shape.parallel_map and shape.caches and not shape.sequential_map
    assert shape.describe() == "range -> cache -> shuffle -> parallel_map -> batch -> prefetch"


def test_options_that_switch_off_tensorflows_own_fixes_are_read() -> None:
    ds = _node("_OptionsDataset", _node("_BatchDataset", _node("_MapDataset", _node("_RangeDataset"))),
               map_parallelization=False, inject_prefetch=False)
    shape = shape_of(ds)
    assert shape is not None
    assert shape.transformations == ("range", "map", "batch")  # with_options transforms nothing
    assert shape.auto_fixes_off == ("map_parallelization", "inject_prefetch")
    assert shape.sequential_map and not shape.prefetches and not shape.prefetch_injected


def test_anything_but_a_dataset_is_unknown() -> None:
    assert shape_of([1, 2, 3]) is None
    assert shape_of(iter([1])) is None

    class Broken:
        def _inputs(self) -> list[object]:
            raise RuntimeError("private API changed")

        def options(self) -> None:
            return None

    assert shape_of(Broken()) is None


def test_a_pipeline_without_prefetch_gets_one_injected_unless_switched_off() -> None:
    assert PipelineShape(("range", "map", "batch")).prefetch_injected
    assert not PipelineShape(("range", "map", "batch"), ("inject_prefetch",)).prefetch_injected


def test_threading_and_autotune_options_are_read() -> None:
    node = _node("_MapDataset", _node("_RangeDataset"))
    options = SimpleNamespace(experimental_optimization=SimpleNamespace(),
                              threading=SimpleNamespace(private_threadpool_size=1),
                              autotune=SimpleNamespace(enabled=False))
    type(node).options = lambda self: options
    shape = shape_of(node)
    assert shape is not None and shape.threadpool_size == 1 and shape.autotune_off
    plain = shape_of(_node("_MapDataset", _node("_RangeDataset")))
    assert plain is not None and plain.threadpool_size is None and not plain.autotune_off
