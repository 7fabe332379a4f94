"""Ops run eagerly are ops: ``EagerLocalExecute: RandomStandardNormal`` is the op's own host event (TF 2.21).

Without this an eager loop's allocation (the catalog's ``allocation_in_loop``) was invisible to the
explanation: the event was read as a wrapper, and its time went to the remainder.
"""

from __future__ import annotations

from pytest_tfperf.profiling.names import layer_scope, op_family, parse_op


def test_an_eager_op_event_is_that_op_outside_any_layer() -> None:
    assert parse_op("EagerLocalExecute: RandomStandardNormal") == ("", "RandomStandardNormal")
    node, op_type = parse_op("EagerLocalExecute: _MklMatMul")  # type: ignore[misc]
    assert layer_scope(node) == "" and op_family(op_type) == "MatMul"


def test_function_calls_and_the_iterators_get_next_are_not_eager_ops() -> None:
    assert parse_op("EagerLocalExecute: __inference_step_24") is None
    assert parse_op("EagerLocalExecute: IteratorGetNext") is None
    assert parse_op("EagerLocalExecute: StatefulPartitionedCall") is None
    assert parse_op("EagerExecute") is None and parse_op("EagerLocalExecute") is None


def test_graph_op_events_read_as_before() -> None:
    assert parse_op("sequential_1/dense_1/MatMul:_MklMatMul") == ("sequential_1/dense_1/MatMul", "_MklMatMul")
    assert parse_op("Iterator::Root::Prefetch") is None
