"""The one line a report leads with for an explained failure: the cause, not the symptom.

Read from an explanation's JSON form (``profiling.attribution.attribution_dict``, as the results JSON holds
it), so the Markdown summary, the HTML report and ``tfperf-report`` on a results file from another machine say
the same. Every field is optional: results come from several versions of the plugin.

In order:

1. the consumer's wait for input listed first, with the tf.data stage behind it: the stage is the answer
   (the wait is what the step felt);
2. most of the profiled change outside every op and stage TensorFlow traced, or time no thread computed
   (the explanation's own hint lines): that, with its share of the profiled change, since a small op listed
   first would mislead (a planted ``time.sleep`` headlined "dense grew +0.07 ms" of a +5.57 ms change);
3. the top cause on the step's path;
4. nothing on the step's path, but tf.data stages moved: the one whose own change is largest;
5. on a GPU, the other path's groups (not on the step's path);
6. nothing beyond its noise: the most likely group (``leads``), said as such;
7. the explanation's own "nothing moved" line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_tfperf.reports.effect_lines import as_float

OUTSIDE_HINT = "outside every op"
IDLE_HINT = "most of the profiled change is time no thread computed"
NOTHING = "no op or stage moved beyond its noise"


def headline(data: Mapping[str, Any] | None) -> str:
    """The time explanation's headline, or its first line (why there is none) when it has no causes field."""
    if not isinstance(data, Mapping):
        return ""
    lines = [str(line) for line in data.get("lines") or []]
    if "causes" not in data:
        return lines[0] if lines else str(data.get("reason") or "")
    causes = [c for c in data.get("causes") or [] if isinstance(c, Mapping)]
    top = causes[0] if causes else None
    paced = data.get("paced_by")
    if top is not None and top.get("kind") == "input wait" and isinstance(paced, Mapping) and paced.get("label"):
        return _behind_wait(paced, top)
    outside = _outside(data, lines)
    if outside:
        return outside
    if top is not None:
        return _change(top)
    pipeline = [c for c in data.get("pipeline") or [] if isinstance(c, Mapping)]
    if pipeline:
        return (f"{_change(pipeline[0])} (nothing on the step's own path moved beyond its noise; tf.data stage "
                "times overlap)")
    off_path = [c for c in data.get("off_path") or [] if isinstance(c, Mapping)]
    if off_path:
        return f"{_change(off_path[0])} (not on the step's path)"
    leads = [c for c in data.get("leads") or [] if isinstance(c, Mapping)]
    if leads:
        lead = leads[0]
        moved = _ms(lead.get("across_pairs_ms", lead.get("delta_ms")))
        return (f"most likely {_stage(lead)} {lead.get('how', 'moved')} {moved}/iteration, though no op or stage "
                f"moved beyond its noise by itself (±{_ms(lead.get('noise_ms'))[1:]} needed)")
    said = next((line.strip() for line in lines[1:] if line.strip().startswith(("no op", "nothing"))), "")
    return said or NOTHING


def _ms(value: object) -> str:
    number = as_float(value)
    return "?" if number is None else f"{number:+.2f} ms"


def _stage(c: Mapping[str, Any]) -> str:
    label = str(c.get("label") or c.get("key") or "?")
    if c.get("kind") != "stage":
        return label
    mode = "parallel" if c.get("current_parallel", c.get("base_parallel")) else "sequential"
    was = c.get("base_parallel")
    if was is not None and c.get("current_parallel") is not None and bool(was) != bool(c.get("current_parallel")):
        mode += f", was {'parallel' if was else 'sequential'}"
    return f"tf.data stage {label} ({mode})"


def _change(c: Mapping[str, Any]) -> str:
    return f"{_stage(c)} {c.get('how', 'moved')} {_ms(c.get('delta_ms'))}/iteration"


def _behind_wait(paced: Mapping[str, Any], wait: Mapping[str, Any]) -> str:
    delta, noise = as_float(paced.get("delta_ms")), as_float(paced.get("noise_ms"))
    moved = delta is not None and (noise is None or abs(delta) > noise)
    stage = _change(paced) if moved else f"{_stage(paced)}, the busiest stage now,"
    return (f"{stage} behind the consumer's wait for input ({wait.get('how', 'moved')} "
            f"{_ms(wait.get('delta_ms'))}/iteration)")


def _outside(data: Mapping[str, Any], lines: Sequence[str]) -> str:
    """The explanation's hint that most of the change is outside every traced op (the untraced CPU time in the
    CPU frame, time outside ops and stages in the self-time one) or time no thread computed, with its share,
    or ""."""
    hint = next((line.strip() for line in lines if OUTSIDE_HINT in line or IDLE_HINT in line), "")
    if not hint:
        return ""
    parts = data.get("remainder_parts_ms")
    part = "idle" if IDLE_HINT in hint else "untraced_cpu" if data.get("frame") == "cpu" else "outside_ops"
    outside = as_float(parts.get(part)) if isinstance(parts, Mapping) else None
    profiled = as_float(data.get("profiled_ms"))
    if outside is None or profiled is None or profiled <= 0:
        return hint
    share = f"{outside:+.2f} of {profiled:+.2f} ms/iteration profiled, {outside / profiled:.0%}"
    head, sep, tail = hint.partition(":")
    return f"{head} ({share}){sep}{tail}" if sep else f"{hint} ({share})"
