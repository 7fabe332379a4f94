"""Which ``tf.data`` stage of one profile is which stage of the other, when the pipeline changed shape.

A stage's key is its path from the root (``stage:Prefetch/Map/Batch``), so a stage inserted above others renames
every stage below it, and a map added right after another map takes the old map's path: without pairing, the
unchanged map reads "appeared" under a new path and is compared, under its old path, with the new map. The two
sides' stages are two trees (a path's parent is its longest prefix); they are matched by the smallest ordered
tree edit (Zhang and Shasha's recursion over forests): deleting or inserting a stage costs 1, matching two stages
of the same transformation costs what tells them apart, and stages of different transformations never match:

- the op families their functions ran (``Group.functions``, and the ops run inline, ``Group.families``): a
  stage's function is what the user wrote, so two maps with disjoint ops are unlikely to be one map (up to 0.6;
  half of it where one ran traced ops and the other none, as a filter on a label beside one on an image's mean);
- a ``Map`` and a ``MapAndBatch`` (0.3): tf.data fuses a map followed by ``.batch`` into one stage, so a map
  inserted before the batch takes the fusion and the map it displaced becomes a plain ``Map``;
- whether each ran in parallel (0.3): ``.map(f)`` and ``.map(f, num_parallel_calls=...)`` differ in that alone;
- a thousandth per level of depth apart, so that of equally good matches the one that keeps a stage at its
  path wins, as keys alone did.

Two stages matched this way always cost less than deleting one and inserting the other (2), so a stage whose
function or parallelism changed stays paired with itself unless the pipeline also gained or lost a stage that
explains it better. A match that depends on the order of siblings (the same tree read with its children
reversed matches otherwise) is ambiguous and dropped. Profiles whose stage keys are the same on both sides are
left as they are: that is unchanged code's case, and a regression inside a stage that keeps its shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

STAGE = "stage:"
DELETE = 1.0  # deleting or inserting one stage
NEVER = 2.5  # matching stages of two transformations: dearer than deleting one and inserting the other
OPS_WEIGHT = 0.6  # two stages whose functions share no op family
PARALLEL_WEIGHT = 0.3  # one ran in parallel, the other did not
FUSED = frozenset({"Map", "MapAndBatch"})  # one user map, fused with the .batch after it or not
FUSED_WEIGHT = 0.3
DEPTH_WEIGHT = 1e-3  # per level apart: only breaks ties
MAX_NODES = 40  # paths on a side (stages and their prefixes) beyond which the edit is not searched (time grows as n^4)
VANISHED = "~before"  # appended to the key of a stage of the baseline that matched nothing but whose key the other
# side uses for another stage: the two must not be compared as one


@dataclass(frozen=True, slots=True)
class StageNode:
    """What the alignment knows of one stage: its key, whether it ran in parallel and the op families its function
    ran (None: unknown, as in a profile of a TensorFlow that does not link a function's ops to its stage)."""

    key: str
    parallel: bool | None = None
    ops: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class _Tree:
    keys: tuple[str, ...]  # node index -> stage key (``stage:`` and the path), virtual parents included
    kinds: tuple[str, ...]  # the transformation: the path's last part
    parallel: tuple[bool | None, ...]
    ops: tuple[frozenset[str] | None, ...]
    depth: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]
    roots: tuple[int, ...]


def aligned_keys(base: Sequence[StageNode], current: Sequence[StageNode]) -> dict[str, str]:
    """For each stage key of ``base`` that is, by the smallest edit, another key's stage in ``current``: that key;
    and for a base stage matched to nothing whose key ``current`` gives to another stage: a key of its own
    (``VANISHED`` appended). Keys that stay are not listed; an empty dict when the key sets are the same, when a
    side has more than MAX_NODES paths, or when the result would give two stages one key."""
    real_base = {n.key for n in base if n.key.startswith(STAGE)}
    real_current = {n.key for n in current if n.key.startswith(STAGE)}
    if real_base == real_current:
        return {}
    trees = [(_tree(base, reverse), _tree(current, reverse)) for reverse in (False, True)]
    if any(len(t.keys) > MAX_NODES for pair in trees for t in pair):
        return {}
    forward, backward = (_match(a, b) for a, b in trees)
    out: dict[str, str] = {}
    for key in real_base:
        matched = forward.get(key)
        if matched != backward.get(key):
            continue  # matched otherwise when siblings are read in the other order: ambiguous, left as it is
        if matched is not None and matched in real_current:
            if matched != key:
                out[key] = matched
        elif key in real_current:
            out[key] = key + VANISHED  # its path is another stage's there
    renamed = [out.get(key, key) for key in real_base]
    return out if len(set(renamed)) == len(renamed) else {}


def _tree(nodes: Sequence[StageNode], reverse: bool) -> _Tree:
    by_key = {n.key: n for n in nodes if n.key.startswith(STAGE)}
    paths: set[tuple[str, ...]] = set()
    for key in by_key:
        parts = tuple(key[len(STAGE):].split("/"))
        for i in range(1, len(parts) + 1):
            paths.add(parts[:i])
    order = sorted(paths, reverse=reverse)
    index = {p: i for i, p in enumerate(order)}
    keys = tuple(STAGE + "/".join(p) for p in order)
    children: list[list[int]] = [[] for _ in order]
    roots: list[int] = []
    for p in order:
        (children[index[p[:-1]]] if len(p) > 1 else roots).append(index[p])
    known = [by_key.get(k) for k in keys]
    return _Tree(keys=keys, kinds=tuple(p[-1] for p in order),
                 parallel=tuple(None if n is None else n.parallel for n in known),
                 ops=tuple(None if n is None else n.ops for n in known), depth=tuple(len(p) for p in order),
                 children=tuple(tuple(c) for c in children), roots=tuple(roots))


def _rename(a: _Tree, i: int, b: _Tree, j: int) -> float:
    cost = DEPTH_WEIGHT * abs(a.depth[i] - b.depth[j])
    if a.kinds[i] != b.kinds[j]:
        if frozenset((a.kinds[i], b.kinds[j])) != FUSED:
            return NEVER
        cost += FUSED_WEIGHT
    if a.parallel[i] is not None and b.parallel[j] is not None and a.parallel[i] != b.parallel[j]:
        cost += PARALLEL_WEIGHT
    ops_a, ops_b = a.ops[i], b.ops[j]
    if ops_a and ops_b:
        cost += OPS_WEIGHT * (1.0 - len(ops_a & ops_b) / len(ops_a | ops_b))
    elif ops_a is not None and ops_b is not None and (ops_a or ops_b):
        cost += OPS_WEIGHT / 2.0  # one ran traced ops, the other none
    return cost


def _match(a: _Tree, b: _Tree) -> dict[str, str]:
    """The smallest ordered edit of forest ``a`` into forest ``b``: {a's key: b's key} of the stages it keeps."""

    @lru_cache(maxsize=None)
    def dist(f: tuple[int, ...], g: tuple[int, ...]) -> tuple[float, tuple[tuple[int, int], ...]]:
        if not f and not g:
            return 0.0, ()
        options: list[tuple[float, tuple[tuple[int, int], ...]]] = []
        if f and g:  # first, so that of equal costs a match wins
            v, w = f[-1], g[-1]
            rename = _rename(a, v, b, w)
            if rename < NEVER:
                inner, inner_pairs = dist(a.children[v], b.children[w])
                rest, rest_pairs = dist(f[:-1], g[:-1])
                options.append((rename + inner + rest, rest_pairs + inner_pairs + ((v, w),)))
        if f:
            cost, pairs = dist(f[:-1] + a.children[f[-1]], g)
            options.append((cost + DELETE, pairs))
        if g:
            cost, pairs = dist(f, g[:-1] + b.children[g[-1]])
            options.append((cost + DELETE, pairs))
        return min(options, key=lambda o: o[0])

    _, pairs = dist(a.roots, b.roots)
    return {a.keys[i]: b.keys[j] for i, j in pairs}
