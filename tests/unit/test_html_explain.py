"""The HTML report's explanations: the additive parts of an attribution (from its JSON form) as a table with
the tensorboard commands, a one-line reason where there is none, results without explanations unchanged."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pytest_tfperf.cli import report_cli
from pytest_tfperf.profiling.attribution import attribute, attribution_dict
from pytest_tfperf.reports.report_model import ExplanationPart, build_report, explanation_views
from pytest_tfperf.reports.shards import load_shards
from tests.unit.test_explain_session import BASE, MS, PLANTED
from tests.unit.test_html_report import HOSTILE, Structure, results


def explained_results(tmp_path: Path) -> Path:
    path = results(tmp_path)
    document = json.loads(path.read_text())
    att = attribution_dict(attribute(base=BASE, current=PLANTED, measured=8 * MS))
    att.update(base_logdir="/r/.tfperf/profiles/t/partner", current_logdir="/r/.tfperf/profiles/t/this")
    document["tests"]["t.py::test_slow"]["explanation"] = att
    document["tests"][HOSTILE]["explanation"] = {"lines": ["no explanation: <b>no profiler</b>"],
                                                 "reason": "<b>no profiler</b>"}
    path.write_text(json.dumps(document))
    return path


def test_the_parts_add_up_to_the_measured_change_and_keep_their_noise(tmp_path: Path) -> None:
    report = build_report(load_shards([explained_results(tmp_path)]))
    by_id = {t.test_id: t for t in report.tests}
    (x,) = by_id["t.py::test_slow"].explanations
    assert x.what == "time" and x.unit == "ms" and x.measured == pytest.approx(8.0)
    planted = [p for p in x.parts if p.group == "planted (MatMul family)"]
    assert planted and planted[0].how == "appeared" and planted[0].noise is not None
    assert x.parts[-1].group == "remainder" and x.parts[-1].noise is None
    assert sum(p.delta for p in x.parts) == pytest.approx(8.0, abs=1e-3)
    assert x.commands == (("baseline", "tensorboard --logdir /r/.tfperf/profiles/t/partner"),
                          ("current", "tensorboard --logdir /r/.tfperf/profiles/t/this"))
    (none,) = by_id[HOSTILE].explanations
    assert none.reason == "<b>no profiler</b>" and none.parts == ()
    assert by_id["t.py::test_ok"].explanations == ()


def test_a_memory_explanation_inside_reads_in_bytes() -> None:
    views = explanation_views({"lines": ["no explanation: x"], "reason": "x",
                               "memory": {"measured_bytes": 3 * 2**20, "causes": [
                                   {"label": "wide (MatMul family)", "how": "grew", "delta_bytes": 2 * 2**20,
                                    "noise_bytes": 0}], "remainder_bytes": 2**20, "within_noise": 4}})
    assert [v.what for v in views] == ["time", "memory"]
    assert views[1].parts == (ExplanationPart("wide (MatMul family)", "grew", 2 * 2**20, 0.0),
                              ExplanationPart("remainder", "", 2**20, None))
    assert explanation_views(None) == () and explanation_views({"lines": []}) == ()
    # The memory alone (the throughput passed): no time row, even though "lines" holds the memory's lines.
    alone = explanation_views({"lines": ["where the memory went: ..."], "reason": None,
                               "memory": {"lines": ["no explanation of the memory: no events"],
                                          "reason": "no events"}})
    assert [(v.what, v.reason) for v in alone] == [("memory", "no events")]


def test_the_page_shows_the_table_and_commands_escaped_and_well_formed(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert report_cli.main([str(explained_results(tmp_path)), "-o", str(out)], stdout=io.StringIO()) == 0
    page = out.read_text(encoding="utf-8")
    parser = Structure()
    parser.feed(page)
    parser.close()
    assert parser.stack == []
    assert page.count('data-explain="time"') == 2
    assert "Where the time went: +8.00 ms/iteration measured" in page
    assert "planted (MatMul family)</td><td data-label=\"how\">appeared" in page
    assert "tensorboard --logdir /r/.tfperf/profiles/t/partner" in page
    assert "&lt;b&gt;no profiler&lt;/b&gt;" in page and "<b>no profiler</b>" not in page


def test_a_pipeline_that_changed_shape_is_a_note() -> None:
    att = attribution_dict(attribute(base=BASE, current=PLANTED, measured=8 * MS))
    att["reshaped"] = [{"key": "stage:Batch/Map", "kind": "stage", "label": "Batch/Map", "how": "grew",
                        "delta_ms": 0.1, "noise_ms": 0.5, "base_parallel": True, "current_parallel": False}]
    (x,) = explanation_views(att)
    assert "tf.data runs differently: Batch/Map sequential, was parallel" in x.notes


def test_a_pipeline_slower_as_a_whole_is_a_part_of_its_own_and_the_parts_still_add_up() -> None:
    views = explanation_views({"measured_ms": 3.1, "common_factor": 1.0, "common_factor_ms": 0.0,
                               "input_factor": 1.5, "input_factor_ms": 3.0, "causes": [], "remainder_ms": 0.1,
                               "within_noise": 3})
    (x,) = views
    assert x.parts == (ExplanationPart("the whole pipeline x1.50 (the consumer's wait)", "", 3.0, None),
                       ExplanationPart("remainder", "", 0.1, None))
    assert sum(p.delta for p in x.parts) == pytest.approx(3.1)


def test_the_page_leads_with_the_answer_the_stage_behind_a_wait(tmp_path: Path) -> None:
    from tests.unit.test_explain_cost_and_headline import STAGE, WAIT

    path = explained_results(tmp_path)
    document = json.loads(path.read_text())
    explanation = document["tests"]["t.py::test_slow"]["explanation"]
    explanation.update(causes=[WAIT], paced_by=STAGE, pipeline=[STAGE])
    path.write_text(json.dumps(document))
    (x,) = {t.test_id: t for t in build_report(load_shards([path])).tests}["t.py::test_slow"].explanations
    assert x.headline.startswith("tf.data stage Batch/Map/Map (sequential) appeared +0.51 ms/iteration behind")
    out = tmp_path / "report.html"
    assert report_cli.main([str(path), "-o", str(out)], stdout=io.StringIO()) == 0
    page = out.read_text(encoding="utf-8")
    answer = page.index('data-explain-headline="time"')
    assert page.index("tf.data stage Batch/Map/Map (sequential) appeared", answer) < page.index("<table", answer)
