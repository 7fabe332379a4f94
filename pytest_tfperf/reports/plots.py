"""The report's charts as inline SVG strings, drawn with matplotlib (the ``[report]`` extra).

Imported only when a report is written, never at plugin load. matplotlib is
used through ``Figure`` and the SVG backend directly (no pyplot: no global
state, no GUI backend). Choices made for a page of ~100 charts that must
render in seconds and weigh under 2 MB:

- text stays text (``svg.fonttype = none``): a tenth of the size of glyph
  paths, selectable, and the browser's font;
- ticks are placed by ``_ticks`` (three or four per axis, no minor ticks):
  matplotlib's locators and tick machinery were most of the drawing time;
- every SVG's ids get a prefix of their own, because several SVGs inlined in
  one HTML page share one id space and ``url(#clip)`` would cross charts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import io
import itertools
import math
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pytest_tfperf.reports.effect_lines import EffectRow
from pytest_tfperf.reports.report_model import MemorySeries, MetricHistory

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

INSTALL_HINT = "pip install 'pytest-tfperf[report]'"

CURRENT = "#0b62d6"
REFERENCE = "#6e7781"
BAND = "#b6d4fb"
PASS = "#1a7f37"
FAIL = "#cf222e"
REFRESH = "#bf8700"
GRID = "#d0d7de"
AXIS = "#8c959f"
# Charts sit two to a row on a desktop (about 540 px) and one to a row on a phone (about 360 px):
# 5.2 in (374 pt) shows 8 pt text at about 11 px on the first and 8 px on the second.
_WIDTH_IN = 5.2
_counter = itertools.count(1)
_ID = re.compile(r'(id="|url\(#|href="#)([^")]+)')


class PlottingUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to install it."""


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlottingUnavailable(f"the HTML report draws its charts with matplotlib, which is not installed: "
                                  f"{INSTALL_HINT}") from None
    return matplotlib


_STYLE = {
    "svg.fonttype": "none", "svg.hashsalt": "tfperf", "font.size": 8, "font.family": "sans-serif",
    "axes.spines.top": False, "axes.spines.right": False, "axes.edgecolor": "#8c959f",
    "axes.linewidth": 0.6, "xtick.color": "#57606a", "ytick.color": "#57606a",
    "xtick.major.size": 2.5, "ytick.major.size": 2.5, "xtick.major.width": 0.6, "ytick.major.width": 0.6,
    "lines.linewidth": 1.0,
}


@contextlib.contextmanager
def style() -> Iterator[None]:
    """The charts' matplotlib settings, for the rendering only: a user's own figures keep theirs."""
    matplotlib = _matplotlib()
    with matplotlib.rc_context(_STYLE):
        try:
            yield
        finally:
            _POOL.clear()
            _LABELS.clear()


def _figure(height_in: float, width_in: float = _WIDTH_IN) -> Figure:
    _matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in))


# Figures reused from one chart to the next, keyed by their layout. Creating an Axes builds its tick
# machinery, which was a third of a small chart's time (profiled); wiping a reused one's artists is free.
_POOL: dict[tuple[object, ...], tuple[Figure, list[Axes]]] = {}


def _canvas(key: tuple[object, ...], height_in: float, panels: int = 1,
            **adjust: float) -> tuple[Figure, list[Axes]]:
    found = _POOL.get(key)
    if found is None:
        fig = _figure(height_in)
        fig.subplots_adjust(**adjust)
        axes = list(fig.subplots(panels, 1, squeeze=False)[:, 0])
        for ax in axes:
            ax.set_axis_off()
        _POOL[key] = (fig, axes)
        _LABELS[id(fig)] = []
        return fig, axes
    for ax in found[1]:
        for artist in [*ax.lines, *ax.texts, *ax.patches, *ax.collections]:
            artist.remove()
    _LABELS[id(found[0])] = []
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class _Label:
    """A text the browser draws: placed by matplotlib's transform, written into the SVG as ``<text>``."""

    transform: Any  # matplotlib Transform: (x, y) -> display pixels
    x: float
    y: float
    text: str
    anchor: str  # start, middle, end
    baseline: str  # central, hanging, auto (alphabetic)
    size: float  # pt
    colour: str


# Labels of the reused figures, by figure. matplotlib lays each text out with the font's metrics
# before it draws (most of a small chart's remaining time, profiled); the browser does that for free.
_LABELS: dict[int, list[_Label]] = {}


def _label(ax: Axes, transform: Any, x: float, y: float, text: str, anchor: str = "start",
           baseline: str = "auto", size: float = 7.5, colour: str = "#57606a") -> None:
    _LABELS.setdefault(id(ax.figure), []).append(_Label(transform, x, y, text, anchor, baseline, size, colour))


def _labels_svg(fig: Figure) -> str:
    labels = _LABELS.pop(id(fig), [])
    if not labels:
        return ""
    scale = 72.0 / fig.dpi  # display pixels -> SVG points (matplotlib writes SVG at 72 units per inch)
    height = fig.get_figheight() * 72.0
    out = ['<g class="labels" font-family="sans-serif">']
    for lab in labels:
        px, py = lab.transform.transform((lab.x, lab.y))
        out.append(f'<text x="{px * scale:.1f}" y="{height - py * scale:.1f}" font-size="{lab.size:g}" '
                   f'fill="{lab.colour}" text-anchor="{lab.anchor}" dominant-baseline="{lab.baseline}">'
                   f"{html.escape(lab.text)}</text>")
    out.append("</g>")
    return "".join(out)


def to_svg(fig: Figure) -> str:
    """The figure as an ``<svg>`` element with page-unique ids and a scalable size."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    labels = _labels_svg(fig)
    if labels:
        text = text.replace("</svg>", labels + "</svg>", 1)
    prefix = f"f{next(_counter)}-"
    text = _ID.sub(lambda m: m.group(1) + prefix + m.group(2), text)
    # Scale with the page: the viewBox keeps the proportions; CSS sets the width.
    text = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1', text, count=1)
    return text.replace("<svg", '<svg class="chart" role="img"', 1)


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round tick values covering [low, high], about ``count`` of them."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        return [low]
    # A span far below the values' own precision (a flat series of big numbers) widens to 1e-9 of them.
    raw = max((high - low) / max(count - 1, 1), abs(high) * 1e-9)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    return [round(i * step, 12) for i in range(first, min(last, first + 2 * count) + 1)]


def _set_ticks(ax: Axes, axis: str, ticks: Sequence[float], labels: Sequence[str] | None = None) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(FixedLocator(list(ticks)))
    target.set_minor_locator(NullLocator())
    if labels is not None:
        target.set_ticklabels(list(labels))


def _range(values: Sequence[float], *, include_zero: bool = False, pad: float = 0.08,
           min_relative_span: float = 0.04) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    if include_zero:
        low = min(low, 0.0)
    # A flat series stays flat: a 0.1% wobble must not fill the panel as if it were a jump.
    middle = (low + high) / 2
    least = max(abs(middle) * min_relative_span, 1e-12 if middle else 1.0)
    if high - low < least:
        low, high = middle - least / 2, middle + least / 2
    span = high - low
    return low - span * pad, high + span * pad


def format_value(value: float, unit: str) -> str:
    """Short axis labels: 1.2k, 3.4M; bytes in MiB; nanoseconds in ms or s."""
    if unit in ("bytes",):
        return f"{value / 2**20:,.0f}" if abs(value) >= 10 * 2**20 else f"{value / 2**20:,.1f}"
    if unit == "ns":
        return f"{value / 1e6:,.3g}"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def unit_label(unit: str) -> str:
    return {"bytes": "MiB", "ns": "ms", "items/s": "items/s", "1/s": "items/s", "count": "count",
            "ratio": "", "fraction": ""}.get(unit, unit)


def _y_axis(ax: Axes, values: Sequence[float], unit: str, *, include_zero: bool = False) -> None:
    """Y limits, gridlines and labels drawn as plain lines and texts (a hidden axis costs nothing)."""
    low, high = _range(values, include_zero=include_zero)
    ax.set_ylim(low, high)
    scale = _SCALES.get(unit, 1.0)  # round numbers in the unit shown: MiB, ms
    ticks = [t * scale for t in nice_ticks(low / scale, high / scale, 5) if low <= t * scale <= high]
    transform = ax.get_yaxis_transform()  # x in axes fractions, y in data
    if ticks:
        ax.hlines(ticks, 0, 1, transform=transform, colors=GRID, lw=0.4, zorder=0)
    for t in ticks:
        _label(ax, transform, -0.012, t, format_value(t, unit), "end", "central")


_SCALES = {"bytes": float(2**20), "ns": 1e6}


def _x_axis(ax: Axes, low: float, high: float, ticks: Sequence[float], labels: Sequence[str],
            title: str = "") -> None:
    ax.set_xlim(low, high)
    ax.plot([0, 1], [0, 0], transform=ax.transAxes, color=AXIS, lw=0.6, clip_on=False)
    transform = ax.get_xaxis_transform()  # x in data, y in axes fractions
    for i, (t, label) in enumerate(zip(ticks, labels)):
        # The outer labels of long axes align inwards, so that they stay inside the figure.
        anchor = "middle" if len(label) < 4 or 0 < i < len(ticks) - 1 else ("start" if i == 0 else "end")
        _label(ax, transform, t, -0.05, label, anchor, "hanging")
    if title:
        _label(ax, ax.transAxes, 1.0, -0.05, title, "end", "hanging")


def _title(ax: Axes, text: str) -> None:
    # A text, not ax.set_title: placing a title measures the (hidden) axis's tick labels, which was
    # over half of the drawing time (profiled).
    _label(ax, ax.transAxes, 0.0, 1.04, text, size=8, colour="#24292f")


def _key(ax: Axes, current: str, reference: str) -> None:
    """A legend without matplotlib's legend (drawn as two texts)."""
    _label(ax, ax.transAxes, 1.0, 1.04, f"● {current}", "end", colour=CURRENT)
    if reference:
        _label(ax, ax.transAxes, 1.0, 1.2, f"□ {reference}", "end", colour=REFERENCE)


def _round_ticks(longest: int) -> list[int]:
    return [int(t) for t in nice_ticks(1, longest, 6)] if longest > 6 else list(range(1, longest + 1))


def rounds_chart(current: Sequence[float], references: Sequence[Sequence[float]], reference_label: str) -> str:
    """Each round's throughput: this run's filled, the reference's hollow (one shade per reference run)."""
    fig, (ax,) = _canvas(("rounds",), 1.9, left=0.1, right=0.99, top=0.8, bottom=0.16)
    everything = list(current) + [v for r in references for v in r]
    for i, ref in enumerate(references):
        ax.plot(range(1, len(ref) + 1), ref, "s", ms=4.5, mfc="none", mec=REFERENCE, mew=0.9,
                alpha=1.0 if i == 0 else 0.55)
    ax.plot(range(1, len(current) + 1), current, "o", ms=4.5, color=CURRENT)
    _y_axis(ax, everything, "items/s")
    longest = max([len(current)] + [len(r) for r in references])
    ticks = _round_ticks(longest)
    _x_axis(ax, 0.4, longest + 0.6, ticks, [str(t) for t in ticks])
    _title(ax, "throughput of each round, items/s")
    _key(ax, "this run", reference_label if references else "")
    return to_svg(fig)


def memory_chart(series: Sequence[MemorySeries]) -> str:
    """Per-round peaks, one panel per memory source: this run filled, the reference hollow."""
    height = 0.3 + 1.1 * len(series)
    fig, axes = _canvas(("memory", len(series)), height, len(series), left=0.1, right=0.99, top=1 - 0.3 / height,
                   bottom=0.3 / height, hspace=0.8)
    for ax, s in zip(axes, series):
        for i, ref in enumerate(s.reference):
            ax.plot(range(1, len(ref) + 1), ref, "s", ms=4, mfc="none", mec=REFERENCE, mew=0.9,
                    alpha=1.0 if i == 0 else 0.55)
        ax.plot(range(1, len(s.current) + 1), s.current, "o", ms=4, color=CURRENT)
        _y_axis(ax, list(s.current) + [v for r in s.reference for v in r], "bytes")
        longest = max([len(s.current)] + [len(r) for r in s.reference])
        ticks = _round_ticks(longest)
        _x_axis(ax, 0.4, longest + 0.6, ticks, [str(t) for t in ticks])
        _title(ax, f"{s.name}, MiB")
    return to_svg(fig)


def history_chart(h: MetricHistory) -> str:
    """One metric over the recorded runs: values, the baseline's level and band, refreshes marked."""
    fig, (ax,) = _canvas(("history",), 1.5, left=0.12, right=0.99, top=0.84, bottom=0.2)
    n = len(h.points)
    xs = list(range(n))
    ys = [p.value for p in h.points]
    values = list(ys)
    if h.band is not None:
        values.append(h.band.level)
        if h.band.low is not None and h.band.high is not None:
            ax.axhspan(h.band.low, h.band.high, color=BAND, alpha=0.6, lw=0)
            values += [h.band.low, h.band.high]
        ax.axhline(h.band.level, color=CURRENT, lw=0.8, ls="--")
    if h.refreshes:
        ax.vlines(list(h.refreshes), 0, 1, transform=ax.get_xaxis_transform(), colors=REFRESH, lw=1.0,
                  linestyles=":")
    ax.plot(xs, ys, "-", color="#24292f", lw=0.9)
    ax.plot(xs[-1:], ys[-1:], "o", ms=3.5, color=CURRENT)  # the latest run
    _y_axis(ax, values, h.unit, include_zero=h.unit == "count")
    label = unit_label(h.unit)
    _title(ax, f"{h.metric}" + (f", {label}" if label else ""))
    where = sorted({0, n - 1, *[round(i) for i in nice_ticks(0, n - 1, 3)]} & set(range(n)))
    _x_axis(ax, -0.5, n - 0.5, where, [h.points[i].label for i in where])
    return to_svg(fig)


def catalog_chart(effects: Sequence[EffectRow]) -> str | None:
    """Fix vs anti-pattern per comparison on a log axis: the effect, its spread over rounds, the gate margin.

    Each row's label sits above its line rather than beside the axis, so the
    axis keeps the full width on a phone.
    """
    rows = [e for e in effects if e.ratio and e.value is not None and e.value > 0 and math.isfinite(e.value)]
    if not rows:
        return None
    height = 0.55 + 0.42 * len(rows)
    fig = _figure(height)
    fig.subplots_adjust(left=0.03, right=0.97, top=1 - 0.08 / height, bottom=0.42 / height)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ys = list(range(len(rows)))[::-1]
    values: list[float] = [1.0]
    for e in rows:
        assert e.value is not None
        values.append(e.value)
        values += [v for v in (e.spread or ()) if v > 0]
        if e.min_effect is not None and e.min_effect > 0:
            values.append(e.min_effect)
    low, high = min(values) / 1.4, max(values) * 1.4
    for y, e in zip(ys, rows):
        assert e.value is not None
        colour = {"pass": PASS, "FAIL": FAIL}.get(e.outcome, REFERENCE)  # grey: reported, or not judged
        if e.spread is not None:
            ax.plot([max(e.spread[0], low), e.spread[1]], [y, y], "-", color=colour, lw=3.0, alpha=0.3,
                    solid_capstyle="butt")
        ax.plot([1.0, e.value], [y, y], "-", color=colour, lw=0.9)
        ax.plot([1.0], [y], "o", ms=4, mfc="white", mec=REFERENCE, mew=0.9)
        ax.plot([e.value], [y], "o", ms=6, color=colour)
        if e.gated and e.min_effect is not None and e.min_effect > 0:
            ax.plot([e.min_effect], [y], "|", ms=12, mew=1.8, color="#24292f")
        ax.text(low * 1.03, y + 0.2, f"{e.scenario}: {e.fix} vs {e.anti}  {e.value_text()}", fontsize=8.5,
                color="#24292f", va="bottom")
    ax.set_xlim(low, high)
    decades = [10.0 ** p for p in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)]
    ticks = [t for t in sorted(set(decades + [2.0, 5.0, 20.0, 50.0, 200.0])) if low <= t <= high]
    _set_ticks(ax, "x", ticks, [f"{t:g}x" for t in ticks])
    ax.axvline(1.0, color="#8c959f", lw=0.6)
    ax.grid(True, axis="x", color="#d0d7de", linewidth=0.4)
    ax.set_axisbelow(True)
    _set_ticks(ax, "y", [])
    ax.spines["left"].set_visible(False)
    ax.set_ylim(-0.6, len(rows) - 0.2)
    ax.set_xlabel("times better than the anti-pattern (log axis; | = gate margin)", labelpad=2)
    return to_svg(fig)
