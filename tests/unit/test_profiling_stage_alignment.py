"""Which tf.data stage of one profile is which of the other when a pipeline changed shape."""

from __future__ import annotations

from pytest_tfperf.profiling.stage_alignment import VANISHED, StageNode, aligned_keys


def keys(*paths: str) -> list[StageNode]:
    return [StageNode("stage:" + p) for p in paths]


def test_stages_under_an_inserted_or_removed_stage_keep_their_identity() -> None:
    assert aligned_keys(keys("Prefetch/MapAndBatch", "Prefetch/MapAndBatch/TensorSlice", "Root"),
                        keys("Prefetch/Map", "Prefetch/Map/MapAndBatch", "Root",
                             "Prefetch/Map/MapAndBatch/TensorSlice")) == {
        "stage:Prefetch/MapAndBatch": "stage:Prefetch/Map/MapAndBatch",
        "stage:Prefetch/MapAndBatch/TensorSlice": "stage:Prefetch/Map/MapAndBatch/TensorSlice"}
    assert aligned_keys(keys("Prefetch/Shuffle/Map"), keys("Prefetch/Map")) == {
        "stage:Prefetch/Shuffle/Map": "stage:Prefetch/Map"}


def test_another_transformation_is_another_stage_and_an_ambiguous_match_pairs_nothing() -> None:
    assert aligned_keys(keys("Prefetch/Map"), keys("Prefetch/Map/Filter")) == {}
    # two equally good places for one map: which sibling comes first would decide, so nothing is paired
    assert aligned_keys(keys("Prefetch/Map"), keys("Prefetch/Batch/Map", "Prefetch/Shuffle/Map")) == {}


def test_the_same_stages_on_both_sides_are_left_as_they_are() -> None:
    base = [StageNode("stage:Prefetch/Map", True, frozenset({"Cast"})), StageNode("stage:Prefetch/Map/Range")]
    current = [StageNode("stage:Prefetch/Map", False, frozenset({"Sin"})), StageNode("stage:Prefetch/Map/Range")]
    assert aligned_keys(base, current) == {}  # a map whose function and parallelism changed is still that map


def test_a_map_added_right_after_a_map_is_told_apart_by_its_functions_ops() -> None:
    decode = frozenset({"DecodeJpeg", "ResizeBilinear"})
    base = [StageNode("stage:Prefetch/Map", True, decode), StageNode("stage:Prefetch/Map/TensorSlice")]
    current = [StageNode("stage:Prefetch/Map", True, frozenset({"ImageProjectiveTransformV3"})),
               StageNode("stage:Prefetch/Map/Map", True, decode), StageNode("stage:Prefetch/Map/Map/TensorSlice")]
    assert aligned_keys(base, current) == {"stage:Prefetch/Map": "stage:Prefetch/Map/Map",
                                           "stage:Prefetch/Map/TensorSlice": "stage:Prefetch/Map/Map/TensorSlice"}
    # removed: the map that stays takes its new path, and the removed one's path, now the other's, is its own
    assert aligned_keys(current, base) == {"stage:Prefetch/Map": "stage:Prefetch/Map" + VANISHED,
                                           "stage:Prefetch/Map/Map": "stage:Prefetch/Map",
                                           "stage:Prefetch/Map/Map/TensorSlice": "stage:Prefetch/Map/TensorSlice"}


def test_parallelism_tells_two_maps_apart_where_their_ops_are_unknown() -> None:
    base = [StageNode("stage:Prefetch/Map", True), StageNode("stage:Prefetch/Map/Batch", False)]
    current = [StageNode("stage:Prefetch/Map", False), StageNode("stage:Prefetch/Map/Map", True),
               StageNode("stage:Prefetch/Map/Map/Batch", False)]
    assert aligned_keys(base, current) == {"stage:Prefetch/Map": "stage:Prefetch/Map/Map",
                                           "stage:Prefetch/Map/Batch": "stage:Prefetch/Map/Map/Batch"}
    # nothing to tell them apart: the map keeps its path, as keys alone would have it
    same = [StageNode("stage:Prefetch/Map", True), StageNode("stage:Prefetch/Map/Map", True),
            StageNode("stage:Prefetch/Map/Map/Batch", False)]
    assert aligned_keys(base, same) == {"stage:Prefetch/Map/Batch": "stage:Prefetch/Map/Map/Batch"}


def test_branches_under_an_interleave_move_with_it() -> None:
    base = keys("Prefetch/Map", "Prefetch/Map/Interleave", "Prefetch/Map/Interleave/TFRecord",
                "Prefetch/Map/Interleave/TensorSlices")
    current = keys("Prefetch/Batch", "Prefetch/Batch/Map", "Prefetch/Batch/Map/Interleave",
                   "Prefetch/Batch/Map/Interleave/TFRecord", "Prefetch/Batch/Map/Interleave/TensorSlices")
    moved = aligned_keys(base, current)
    assert moved["stage:Prefetch/Map/Interleave/TFRecord"] == "stage:Prefetch/Batch/Map/Interleave/TFRecord"
    assert moved["stage:Prefetch/Map/Interleave/TensorSlices"] == "stage:Prefetch/Batch/Map/Interleave/TensorSlices"
    assert len(moved) == 4


def test_other_groups_are_not_stages() -> None:
    assert aligned_keys([StageNode("layer:conv"), StageNode("stage:Prefetch/Map")],
                        [StageNode("layer:dense"), StageNode("stage:Prefetch/Map")]) == {}


def test_a_map_that_lost_its_fusion_with_the_batch_is_still_that_map() -> None:
    # A crop map added before .batch takes tf.data's map-and-batch fusion; the decode it displaced runs as a Map.
    decode = frozenset({"DecodeJpeg", "ResizeBilinear"})
    base = [StageNode("stage:Prefetch/MapAndBatch", True, decode), StageNode("stage:Prefetch/MapAndBatch/Repeat")]
    current = [StageNode("stage:Prefetch/MapAndBatch", True, frozenset({"Slice", "ReverseV2"})),
               StageNode("stage:Prefetch/MapAndBatch/Map", True, decode),
               StageNode("stage:Prefetch/MapAndBatch/Map/Repeat")]
    assert aligned_keys(base, current) == {"stage:Prefetch/MapAndBatch": "stage:Prefetch/MapAndBatch/Map",
                                           "stage:Prefetch/MapAndBatch/Repeat": "stage:Prefetch/MapAndBatch/Map/Repeat"}


def test_a_stage_whose_function_ran_no_traced_op_is_told_from_one_that_ran_some() -> None:
    # A second .filter (on an image's mean) added right after a filter on a label, whose predicate's op is too short
    # to be traced: the label filter is the one that ran none.
    base = [StageNode("stage:Prefetch/Batch/Filter", False, frozenset()),
            StageNode("stage:Prefetch/Batch/Filter/Map", True, frozenset({"DecodeJpeg"}))]
    current = [StageNode("stage:Prefetch/Batch/Filter", False, frozenset({"Mean"})),
               StageNode("stage:Prefetch/Batch/Filter/Filter", False, frozenset()),
               StageNode("stage:Prefetch/Batch/Filter/Filter/Map", True, frozenset({"DecodeJpeg"}))]
    assert aligned_keys(base, current)["stage:Prefetch/Batch/Filter"] == "stage:Prefetch/Batch/Filter/Filter"
    # what a function ran unknown (no link in the profile): the old path wins the tie
    unknown = [StageNode(n.key, n.parallel, None) for n in base]
    assert "stage:Prefetch/Batch/Filter" not in aligned_keys(unknown, [StageNode(n.key, n.parallel, None)
                                                                       for n in current])
