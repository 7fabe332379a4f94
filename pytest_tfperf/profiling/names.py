"""What a profiler event's name says: a TensorFlow op's layer and op family, or a tf.data stage.

TensorFlow names a host op event ``<node name>:<op type>`` (``TraceMeOp``), for
example ``gradient_tape/sequential_1/planted_conv_1/convolution/Conv2DBackpropFilter:_MklNativeConv2DBackpropFilter``.
Two things make raw names a poor key for comparing two profiles:

- oneDNN renames and fuses op types (``MatMul``, ``_MklMatMul``, ``_FusedMatMul``,
  ``_MklNativeFusedConv2D``): the same work read by type alone would look like
  one op vanishing and another appearing. ``op_family`` maps them to one family.
- name scopes carry uniquifying counters (``sequential_1``, ``planted_conv_1``)
  that differ between processes and shift when a layer is added. ``layer_scope``
  drops them and keeps the model/layer part of the scope, so the forward and
  backward ops of a layer, fused or not, fall in one group.

tf.data stages are events named ``Iterator::Root::Prefetch::ParallelMapV2::...``;
``stage_key`` drops ``Root``, element indices and the ``Parallel``/``V2`` spelling,
so a map that lost its parallelism keeps its key and shows as the same stage.
Pure string work: no TensorFlow here.
"""

from __future__ import annotations

import re

_OP_TYPE = re.compile(r"[A-Z_][A-Za-z0-9_]*\Z")
_COUNTER = re.compile(r"(?:_\d+)+\Z")
# Scope parts that wrap a layer's ops without naming a layer: the gradient tape, and the function calls
# that model.fit's multi-step function and nested tf.functions put in front of the model's scope.
_WRAPPER_SCOPES = frozenset({"gradient_tape", "StatefulPartitionedCall", "PartitionedCall"})
# Scope depth that names a layer: model/layer (Keras 3 prefixes ops with the model's name).
SCOPE_DEPTH = 2

# Prefixes oneDNN and Grappler give op types; stripped in this order, repeatedly.
_TYPE_PREFIXES = ("_MklNative", "_Mkl", "_Fused", "_", "Mkl", "Native", "Fused")
# Suffixes of the gradient and versioned variants of one family.
_TYPE_SUFFIXES = re.compile(r"(?:Backprop(?:Input|Filter)(?:V\d+)?|GradGrad|Grad(?:V\d+)?|Native|V\d+|Ex)+\Z")
_FAMILY_ALIASES = {"BatchMatMul": "MatMul", "DepthwiseConv2d": "DepthwiseConv2D", "FusedBatchNorm": "BatchNorm",
                   "FusedBatchNormV3": "BatchNorm", "EagerPyFunc": "PyFunc", "PyFuncStateless": "PyFunc"}

# tf.data stages that hand work to other threads: their time on the consumer's
# thread is waiting for that work, not work of their own.
_ASYNC_STAGE_PREFIXES = ("Prefetch", "Parallel", "MapAndBatch", "LegacyParallel", "DataService")


# An op run eagerly is one host event, ``EagerLocalExecute: RandomStandardNormal``, with no node name: its
# kernel runs inside it (``ParallelFor`` and the like, which inherit it). Function calls and the iterator's
# get-next (the consumer's wait, read apart) use the same wrapper and are not ops of their own.
_EAGER_PREFIX = "EagerLocalExecute: "
_EAGER_NOT_OPS = ("__", "IteratorGetNext", "PartitionedCall", "StatefulPartitionedCall")
# Keras 3's optimizers, as their update's name scope reads in a profile (``layer:adam``). A renamed optimizer is
# not recognised: it is then ranked and worded like any layer.
OPTIMIZERS = frozenset({"adam", "adamw", "sgd", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "ftrl", "lion",
                        "lamb", "adafactor", "muon", "loss_scale_optimizer"})


def parse_op(event_name: str) -> tuple[str, str] | None:
    """``(node name, op type)`` when the event is a TensorFlow op, else None (wrappers, tf.data, markers).

    An eager op has no node name: ``("", op type)``, an op outside any layer.
    """
    if event_name.startswith(_EAGER_PREFIX):
        op_type = event_name[len(_EAGER_PREFIX):]
        if not _OP_TYPE.match(op_type) or op_type.startswith(_EAGER_NOT_OPS):
            return None
        return "", op_type
    node, sep, op_type = event_name.rpartition(":")
    if not sep or not node or not _OP_TYPE.match(op_type) or node.startswith("Iterator") or node.endswith(":"):
        return None
    return node, op_type


def op_family(op_type: str) -> str:
    """One name for an op type's renamed, fused, versioned and gradient variants: ``_MklNativeConv2DBackpropFilter`` -> ``Conv2D``."""
    name = op_type
    changed = True
    while changed:
        changed = False
        for prefix in _TYPE_PREFIXES:
            if name.startswith(prefix) and len(name) > len(prefix) and name[len(prefix)].isupper():
                name = name[len(prefix):]
                changed = True
    name = _FAMILY_ALIASES.get(name, name)
    stripped = _TYPE_SUFFIXES.sub("", name) or name
    return _FAMILY_ALIASES.get(stripped, stripped)


def strip_counter(part: str) -> str:
    """``planted_conv_1`` -> ``planted_conv``; ``conv2d_3_1`` -> ``conv2d`` (Keras' and TensorFlow's uniquifiers)."""
    return _COUNTER.sub("", part) or part


def layer_scope(node_name: str, depth: int = SCOPE_DEPTH) -> str:
    """The model/layer scope of an op's node name without counters, or "" for an op outside any scope."""
    parts = [p for p in node_name.split("/")[:-1] if p and strip_counter(p) not in _WRAPPER_SCOPES]
    return "/".join(strip_counter(p) for p in parts[:depth])


def is_stage(event_name: str) -> bool:
    return event_name.startswith("Iterator::")


def stage_key(event_name: str) -> str:
    """``Iterator::Root::Prefetch::ParallelMapV2::FlatMap[0]::Generator`` -> ``Prefetch/Map/FlatMap/Generator``."""
    parts = [p for p in event_name.split("::")[1:] if p != "Root"]
    return "/".join(_stage_kind(p) for p in parts) or "Root"


def _stage_kind(part: str) -> str:
    part = re.sub(r"\[\d+\]\Z", "", part)
    part = re.sub(r"V\d+\Z", "", part)
    for prefix in ("LegacyParallel", "Parallel"):
        if part.startswith(prefix) and len(part) > len(prefix):
            part = part[len(prefix):]
    return part


def stage_leaf(event_name: str) -> str:
    """The transformation an ``Iterator::`` event belongs to, as TensorFlow spells it (``ParallelMapV2``)."""
    return re.sub(r"\[\d+\]\Z", "", event_name.rsplit("::", 1)[-1])


def is_async_stage(event_name: str) -> bool:
    return stage_leaf(event_name).startswith(_ASYNC_STAGE_PREFIXES)


def is_parallel_stage(event_name: str) -> bool:
    leaf = stage_leaf(event_name)
    return leaf.startswith(("Parallel", "LegacyParallel", "MapAndBatch"))


def is_tf_data_thread(line_name: str) -> bool:
    """tf.data's own threads (iterator and private thread pool), as opposed to the consumer's."""
    return line_name.startswith("tf_data")


def is_optimizer_group(key: str) -> bool:
    """A group key that is a Keras optimizer's update (``layer:adam``): its time grows with every trainable weight."""
    return key.split(":", 1)[-1] in OPTIMIZERS
