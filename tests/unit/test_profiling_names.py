"""Profiler event names read as layer, op family and tf.data stage, so renames and counters do not split groups."""

from __future__ import annotations

import pytest

from pytest_tfperf.profiling.names import (
    is_async_stage, is_parallel_stage, layer_scope, op_family, parse_op, stage_key, strip_counter,
)


@pytest.mark.parametrize("op_type, family", [
    ("MatMul", "MatMul"), ("_MklMatMul", "MatMul"), ("_FusedMatMul", "MatMul"), ("_MklNativeFusedMatMul", "MatMul"),
    ("BatchMatMulV2", "MatMul"), ("Conv2D", "Conv2D"), ("_MklNativeConv2DBackpropFilter", "Conv2D"),
    ("_MklNativeFusedConv2D", "Conv2D"), ("Conv2DBackpropInput", "Conv2D"),
    ("_MklNativeDepthwiseConv2dNativeBackpropFilter", "DepthwiseConv2D"), ("DepthwiseConv2dNative", "DepthwiseConv2D"),
    ("FusedBatchNormGradV3", "BatchNorm"), ("_MklFusedBatchNormV3", "BatchNorm"), ("ReluGrad", "Relu"),
    ("BiasAddGrad", "BiasAdd"), ("EagerPyFunc", "PyFunc"), ("ConcatV2", "Concat"), ("Cast", "Cast"),
])
def test_renamed_fused_and_gradient_op_types_share_a_family(op_type: str, family: str) -> None:
    assert op_family(op_type) == family


def test_op_events_parse_and_wrappers_do_not() -> None:
    assert parse_op("sequential_1/dense_1/MatMul:_MklMatMul") == ("sequential_1/dense_1/MatMul", "_MklMatMul")
    for wrapper in ("EagerLocalExecute: __inference_step_24", "ExecutorState::Process", "Iterator::Root::Map",
                    "tfperf_window", "FunctionRun", "x:lower"):
        assert parse_op(wrapper) is None


def test_layer_scope_drops_counters_and_the_gradient_tape_wrapper() -> None:
    forward = "sequential_1/planted_conv_1/convolution"
    backward = "gradient_tape/sequential_1/planted_conv_1/convolution/Conv2DBackpropFilter"
    assert layer_scope(forward) == layer_scope(backward) == "sequential/planted_conv"
    # an LSTM's loop body nests the scope again: the model/layer prefix still names it
    assert layer_scope("sequential_1/lstm_1/while/body/_1/sequential_1/lstm_1/while/lstm_cell_1/MatMul") \
        == "sequential/lstm"
    # model.fit runs the step inside a function call: its wrapper is not the layer
    assert layer_scope("StatefulPartitionedCall/sequential_1/planted_conv_1/Relu") == "sequential/planted_conv"
    assert layer_scope("StatefulPartitionedCall_2/sequential_1/dense_1/MatMul") == "sequential/dense"
    assert layer_scope("MatMul") == ""
    assert strip_counter("conv2d_3_1") == "conv2d" and strip_counter("_1") == "_1"


def test_stage_keys_ignore_parallelism_spelling_and_element_indices() -> None:
    assert stage_key("Iterator::Root::Prefetch::ParallelMapV2::FlatMap[0]::Generator") \
        == "Prefetch/Map/FlatMap/Generator"
    assert stage_key("Iterator::Root::Prefetch::Map") == "Prefetch/Map"
    assert stage_key("Iterator::Root") == "Root"
    assert is_async_stage("Iterator::Root::Prefetch") and is_async_stage("Iterator::Root::ParallelMapV2")
    assert not is_async_stage("Iterator::Root::Prefetch::Map")
    assert is_parallel_stage("Iterator::Root::MapAndBatch") and not is_parallel_stage("Iterator::Root::Map")
