"""The self-contained HTML report: one file, no network, readable from a phone to a desktop.

``render_html(report)`` turns a ``report_model.Report`` into the page; the
charts come from ``plots`` (matplotlib, the ``[report]`` extra) as inline SVG.
Nothing is fetched: styles are inline, there is no script, so the page opens
the same from disk, a CI artifact or a mail attachment. Every text that comes
from a results file (test ids, messages, diagnoses) goes through ``_e``:
test ids are user-controlled strings.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path

from pytest_tfperf.storage.atomic_files import atomic_write_text
from pytest_tfperf.reports.effect_lines import EffectRow
from pytest_tfperf.reports.report import format_rate
from pytest_tfperf.reports.report_model import ExplanationView, Report, TestView

_STATUS = {"failed": ("FAILED", "bad"), "regressed": ("REGRESSED", "bad"), "noisy": ("noisy", "warn"),
           "unconfirmed": ("unconfirmed", "warn"),
           "improved": ("improved", "good"), "unchanged": ("ok", "ok"), "unavailable": ("not compared", "none"),
           "": ("no verdict", "none")}

_CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--soft:#f6f8fa;--bad:#cf222e;--warn:#9a6700;
--good:#1a7f37;--ok:#1f2328}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1100px;margin:0 auto;padding:12px}
h1{font-size:1.35em;margin:.2em 0}h2{font-size:1.15em;margin:1.4em 0 .4em;border-bottom:1px solid var(--line)}
h3{font-size:1em;margin:0;word-break:break-all}h4{font-weight:400;margin:10px 0 4px}
a{color:#0969da}
.meta{color:var(--muted);font-size:.88em;word-break:break-word}
.chips span{display:inline-block;margin:2px 6px 2px 0;padding:1px 8px;border-radius:10px;background:var(--soft);
border:1px solid var(--line);font-size:.88em}
.badge{display:inline-block;padding:0 6px;border-radius:4px;font-weight:600;font-size:.85em;white-space:nowrap}
.bad{color:#fff;background:var(--bad)}.warn{color:#fff;background:var(--warn)}.good{color:#fff;background:var(--good)}
.ok{color:var(--ok);background:#dafbe1}.none{color:var(--muted);background:var(--soft)}
table{border-collapse:collapse;width:100%;font-size:.9em}
th,td{text-align:left;padding:4px 6px;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--soft);font-weight:600}
td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
td.id{word-break:break-all;min-width:17em}
table.overview td:last-child{min-width:14em}
.nw{white-space:nowrap}
tr.failed td{background:#ffebe9}
.test{border:1px solid var(--line);border-radius:6px;padding:10px;margin:14px 0}
.test.failed{border-color:var(--bad)}
.facts{display:flex;flex-wrap:wrap;gap:4px 18px;margin:6px 0;font-size:.9em}
.facts b{font-weight:600;color:var(--muted)}
.msg{margin:4px 0;padding:4px 8px;background:var(--soft);border-left:3px solid var(--line);font-size:.88em;
white-space:pre-wrap;word-break:break-word}
.msg.bad{color:var(--fg);background:#ffebe9;border-left-color:var(--bad)}
.charts{display:grid;grid-template-columns:1fr 1fr;gap:8px}
.charts .wide{grid-column:1/-1}
figure{margin:0}svg.chart{width:100%;height:auto;display:block}
#catalog figure{max-width:620px}
.path{display:block;color:var(--muted);font-size:.8em}
.meter{display:inline-block;width:8em;height:.8em;background:var(--soft);border:1px solid var(--line);
vertical-align:middle}.meter i{display:block;height:100%;background:#0b62d6}
.note{color:var(--muted);font-size:.85em}
table.explain{width:auto;min-width:50%;margin:4px 0}
table.explain tr.total td{font-weight:600;border-top:2px solid var(--line)}
code.cmd{display:block;font-size:.82em;word-break:break-all;color:var(--muted)}
@media (max-width:720px){
 main{padding:8px}.charts{grid-template-columns:1fr}
 table.cards thead{display:none}
 table.cards tr{display:block;border:1px solid var(--line);border-radius:6px;margin:8px 0;padding:4px}
 table.cards td{display:flex;gap:8px;border:0;padding:2px 4px;text-align:left}
 table.cards td::before{content:attr(data-label);flex:0 0 7.5em;color:var(--muted);font-weight:600}
 table.cards td.num{white-space:normal}
 table.effects td{display:inline;padding:0 6px 0 0}
 table.effects td::before{content:none}
 table.effects td:first-child{font-weight:600}
 table.effects tr{padding:4px 8px}
}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "–"
    if math.isinf(value):
        return "∞"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f} MiB"


def _rate(value: float | None) -> str:
    return "–" if value is None else format_rate(value)


def change_text(t: TestView) -> str:
    if t.change is None:
        return "–"
    text = _pct(t.change)
    if t.ci is not None:
        text += f" [{_pct(t.ci[0])}, {_pct(t.ci[1])}]"
    return text


def detection_text(t: TestView) -> str:
    """The slowdown this comparison catches: the throughput verdict's minimum detectable change."""
    if t.detection_limit is None:
        return "–"
    if math.isinf(t.detection_limit):
        return "none"
    return f"≥ {t.detection_limit * 100:.0f}%"


def _badge(status: str) -> str:
    label, css = _STATUS.get(status, (status, "none"))
    return f'<span class="badge {css}">{_e(label)}</span>'


def _overview(tests: Sequence[TestView]) -> str:
    head = ("Test", "Verdict", "Change [CI]", "Detects", "Throughput", "Peaks", "Traces", "Diagnoses")
    rows = []
    for t in tests:
        peaks = "<br>".join(f'<span class="nw">{_e(name)}: {_mib(v)}</span>' for name, v in t.peaks) or "–"
        diagnoses = "<br>".join(_e(d) for d in t.notable_diagnoses) or "–"
        cells = [
            ("id", _test_link(t)),
            ("", _badge(t.status) + (f'<div class="note">{_e(t.compared_with)}</div>' if t.compared_with else "")),
            ("num", _e(change_text(t))), ("num", _e(detection_text(t))), ("num", _e(_rate(t.throughput))),
            ("", peaks), ("num", _e(t.traces)), ("", diagnoses),
        ]
        cls = ' class="failed"' if t.failed else ""
        rows.append(f"<tr{cls}>" + "".join(
            f'<td class="{css}" data-label="{_e(label)}">{body}</td>' if css else f'<td data-label="{_e(label)}">{body}</td>'
            for label, (css, body) in zip(head, cells)) + "</tr>")
    return ('<table class="cards overview"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
            + '<p class="note">Change: this run against what it was compared with, with its confidence interval. '
              "Detects: the smallest slowdown this comparison catches (the verdict's minimum detectable change). "
              "Peaks: TensorFlow allocator peaks are what a round added above its start; RSS and NVML are "
              "absolute. Traces: tf.function traces during warm-up + steady state.</p>")


def _test_link(t: TestView) -> str:
    """The test's name as a link, its file path small above it: the name is what people scan for."""
    path, sep, name = t.test_id.rpartition("::")
    label = f'<a href="#{t.anchor}">{_e(name if sep else t.test_id)}</a>'
    return "<div>" + (f'<span class="path">{_e(path)}</span>' if sep else "") + label + "</div>"


def _effect_table(effects: Sequence[EffectRow]) -> str:
    head = ("Scenario", "Fix vs anti", "Effect", "Value", "Rounds", "Gate", "Result")
    rows = []
    for e in effects:
        css = {"pass": "good", "FAIL": "bad"}.get(e.outcome, "none")
        cells = [_e(e.scenario), _e(f"{e.fix} vs {e.anti}"), _e(e.what), _e(e.value_text()), _e(e.spread_text()),
                 _e(e.margin_text()), f'<span class="badge {css}">{_e(e.outcome)}</span>']
        rows.append("<tr>" + "".join(f'<td data-label="{h}">{c}</td>' for h, c in zip(head, cells)) + "</tr>")
    return ('<table class="cards effects"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _catalog(effects: Sequence[EffectRow]) -> str:
    from pytest_tfperf.reports import plots

    chart = plots.catalog_chart(effects)
    parts = ['<section id="catalog"><h2>Catalog: how much each fix beats its anti-pattern here</h2>']
    if chart:
        parts.append(f'<figure class="plot" data-plot="catalog">{chart}</figure>')
        parts.append('<p class="note">Ratios on a log axis: the dot is the effect (best round against best round '
                     "for throughput), the pale bar its spread over paired rounds, the black tick the gate margin "
                     "the fix must reach; green passed, red failed, grey is reported without a gate or not judged (a scenario that needs idle cores, measured on a busy machine). Effects that "
                     "are differences (memory growth, traces) or iterations (NaN) are in the table only.</p>")
    parts.append(_effect_table(effects))
    parts.append("</section>")
    return "".join(parts)


def _amount(value: float | None, unit: str, signed: bool = True) -> str:
    """An explanation's figure: ms per iteration, or bytes as KiB/MiB."""
    if value is None:
        return "–"
    if unit == "bytes":
        scaled, name = (value / 2**20, "MiB") if abs(value) >= 2**20 else (value / 2**10, "KiB")
        return f"{scaled:+,.1f} {name}" if signed else f"{scaled:,.1f} {name}"
    digits = 2 if abs(value) < 10 else 1
    return f"{value:+.{digits}f} ms" if signed else f"{value:.{digits}f} ms"


def _explanation(x: ExplanationView) -> str:
    """The additive parts as a small table (group, how, change ± noise), the notes, the tensorboard commands."""
    title = "Where the memory went" if x.what == "memory" else "Where the time went"
    per = "" if x.unit == "bytes" else "/iteration"
    if x.reason is not None:
        return (f'<div class="msg explain" data-explain="{x.what}"><b>{title}:</b> {_e(x.reason)}</div>'
                + "".join(f'<p class="note">{_e(n)}</p>' for n in x.notes))
    head = f'<h4 data-explain="{x.what}">{title}: {_e(_amount(x.measured, x.unit))}{per} measured</h4>'
    if x.headline:  # the answer first: the cause behind the symptom, or the hint with its share
        head += f'<p class="answer" data-explain-headline="{x.what}"><b>{_e(x.headline)}</b></p>'
    rows = "".join(
        f'<tr><td data-label="group">{_e(p.group)}</td><td data-label="how">{_e(p.how)}</td>'
        f'<td class="num" data-label="change">{_e(_amount(p.delta, x.unit))}</td>'
        f'<td class="num" data-label="noise">{"" if p.noise is None else "± " + _e(_amount(p.noise, x.unit, False))}'
        "</td></tr>" for p in x.parts)
    if x.measured is not None:
        rows += (f'<tr class="total"><td data-label="group">measured</td><td></td>'
                 f'<td class="num" data-label="change">{_e(_amount(x.measured, x.unit))}</td><td></td></tr>')
    table = ('<table class="cards explain"><thead><tr><th>group</th><th>how</th>'
             f"<th>change{per}</th><th>noise</th></tr></thead><tbody>{rows}</tbody></table>") if rows else ""
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in x.notes)
    commands = "".join(f'<code class="cmd">{_e(c)}  # {_e(side)}</code>' for side, c in x.commands)
    return head + table + notes + commands


def _test_section(t: TestView) -> str:
    from pytest_tfperf.reports import plots

    facts = [("verdict", _badge(t.status)), ("compared with", _e(t.compared_with or "nothing")),
             ("throughput", _e(_rate(t.throughput))), ("change", _e(change_text(t))),
             ("detects", _e(detection_text(t))), ("traces", _e(t.traces)),
             ("environment", f"<code>{_e(t.environment)}</code>")]
    if t.gpu_busy is not None:
        share = max(0.0, min(1.0, t.gpu_busy))
        meter = (f'<span class="meter" title="{share:.0%}"><i style="width:{share * 100:.0f}%"></i></span> '
                 f"{share:.0%}")
        facts.append(("GPU busy", meter))
    parts = [f'<section class="test{" failed" if t.failed else ""}" id="{t.anchor}" data-test-id="{_e(t.test_id)}">',
             f"<h3>{_e(t.test_id)}</h3>",
             '<div class="facts">' + "".join(f"<span><b>{k}</b> {v}</span>" for k, v in facts) + "</div>"]
    for message in t.messages:
        parts.append(f'<div class="msg{" bad" if t.failed else ""}">{_e(message)}</div>')
    for _, severity, diagnosis in t.diagnoses:
        parts.append(f'<div class="msg{" bad" if severity == "failure" else ""}">diagnosis: {_e(diagnosis)}</div>')
    parts += [_explanation(x) for x in t.explanations]
    charts = []
    if t.rounds_current:
        charts.append(f'<figure class="plot" data-plot="rounds">'
                      f"{plots.rounds_chart(t.rounds_current, t.rounds_reference, t.reference_label or 'reference')}"
                      "</figure>")
    if t.memory:
        charts.append(f'<figure class="plot" data-plot="memory">{plots.memory_chart(t.memory)}</figure>')
    if charts:
        parts.append('<div class="charts">' + "".join(charts) + "</div>")
    runs = max((len(h.points) for h in t.history), default=0)
    if runs >= 2:
        # A metric that never moved (steady traces at 0, say) is said in words: a flat line tells no more.
        flat = [h for h in t.history if len({p.value for p in h.points}) == 1]
        drawn = [h for h in t.history if len(h.points) >= 2 and h not in flat]
        parts.append(f'<h4 class="note">History in this environment: {runs} recorded runs. Dashed: the baseline\'s '
                     "level; shaded: its 99% prediction band for one new run (from 2 baseline runs up); dotted: "
                     "the run that refreshed the baseline."
                     + ("".join(f" {_e(h.metric)} was {h.points[0].value:g} in every run." for h in flat))
                     + "</h4>")
        parts.append('<div class="charts">' + "".join(
            f'<figure class="plot" data-plot="history" data-metric="{_e(h.metric)}">{plots.history_chart(h)}'
            "</figure>" for h in drawn) + "</div>")
    elif runs:
        parts.append('<p class="note">History: 1 recorded run so far; its charts start at the second.</p>')
    parts.append("</section>")
    return "".join(parts)


def render_html(report: Report) -> str:
    """The whole page as a string (charts included); raises ``plots.PlottingUnavailable`` without matplotlib."""
    from pytest_tfperf.reports import plots

    with plots.style():  # fails before any work without matplotlib, with the install command
        return _render(report)


def _render(report: Report) -> str:
    counts = [(s, report.count(s)) for s in ("failed", "regressed", "unconfirmed", "noisy", "improved", "unchanged",
                                             "unavailable")]
    chips = "".join(f"<span>{n} {_e(_STATUS[s][0])}</span>" for s, n in counts if n)
    no_verdict = report.count("")
    if no_verdict:
        chips += f"<span>{no_verdict} without verdict</span>"
    environments = "; ".join(
        f"<code>{_e(fp)}</code> (" + _e(", ".join(f"{k} {v}" for k, v in hard if k in _SHOWN_KEYS)) + ")"
        for fp, hard in report.environments)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(report.title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{_e(report.title)}</h1>",
        f'<p class="meta">{len(report.tests)} test(s) from {len(report.sources)} results file(s): '
        f"{_e(', '.join(report.sources))}"
        + (f" · generated {_e(report.generated_at)}" if report.generated_at else "")
        + f"<br>environment(s): {environments}</p>",
        f'<p class="chips">{chips}</p>',
        '<nav class="meta"><a href="#overview">overview</a>'
        + (' · <a href="#catalog">catalog</a>' if report.effects else "") + ' · <a href="#tests">tests</a></nav>',
        '<section id="overview"><h2>Overview</h2>', _overview(report.tests), "</section>",
    ]
    if report.effects:
        parts.append(_catalog(report.effects))
    parts.append('<section id="tests"><h2>Tests</h2>')
    parts += [_test_section(t) for t in report.tests]
    parts.append("</section>")
    parts.append('<p class="note">Written by pytest-tfperf. Charts: matplotlib. Filled points: this run; hollow: '
                 "what it was compared with.</p></main></body></html>")
    return "\n".join(parts) + "\n"


# The environment keys a reader recognises a machine by (the fingerprint covers them all).
_SHOWN_KEYS = ("cpu.model", "cpu.cores", "gpu.models", "tensorflow", "python")


def write_html(path: str | Path, report: Report) -> Path:
    """Render and write the page atomically (parents created)."""
    path = Path(path)
    text = render_html(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path
