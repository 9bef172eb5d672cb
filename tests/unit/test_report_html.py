"""report.html from a sweep's files, without a browser (tests/integration/test_report_html.py opens it in one)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from nest_experiments.reports.plot import plot_folder
from nest_experiments.reports.report_html import VERDICT_CLASSES, short_point, to_html, write_report_html
from tests.unit.sweep_synth import RunSpec, make_run, make_sweep


def test_markdown_tables_images_and_raw_html(tmp_path: Path) -> None:
    (tmp_path / "f.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    out = to_html("# T\n\n| a | b |\n|---|---|\n| x \\| y | <b>z</b> |\n\n![fig](f.png)\n\n![gone](g.png)\n\n"
                  "![far](https://example.org/x.png)\n", base=tmp_path, id_prefix="p-")
    assert '<h1 id="p-t">T</h1>' in out
    assert "<td>x | y</td>" in out and "<td>&lt;b&gt;z&lt;/b&gt;</td>" in out  # raw HTML stays text
    assert 'src="data:image/png;base64,iVBORw0KGgpmYWtl"' in out
    assert "(figure not found: g.png)" in out and "(figure not found: https://example.org/x.png)" in out
    assert "example.org/x.png\"" not in out  # no reference that a browser would fetch


def test_a_sweep_report_html_holds_everything_inline(tmp_path: Path) -> None:
    root = make_sweep(tmp_path, reps=3, targets=(5,))
    hot = make_run(root, RunSpec(aqm="pie", target_ms=10, cpu_saturated_windows=2, warnings=("w <1>",)))
    manifest = json.loads((hot / "manifest.json").read_text())
    manifest["cpu"] = {"saturated_windows": 4, "saturated_by": {"machine": 1, "process": 3}}  # the guard's record
    manifest["phases"] = [{"name": "traffic"}]  # a field the report does not know is left alone
    (hot / "manifest.json").write_text(json.dumps(manifest))
    make_run(root, RunSpec(aqm="fq_pie", target_ms=10, status="failed", reason="boom"))
    html_path = next(p for p in plot_folder(root) if p.name == "report.html")
    text = html_path.read_text()
    assert re.search(r"""(src|href)=["'](?!data:|#)""", text) is None  # nothing but data: URIs and anchors
    assert "<script" not in text and "http://" not in text and "https://" not in text
    pngs = [*sorted((root / "report").glob("*.png")), *sorted(root.glob("*/qdisc.png")),
            *sorted(root.glob("*/timeline.png"))]
    assert len(list(root.glob("*/timeline.png"))) == len(list(root.glob("*/segments.csv")))  # each DASH run's
    assert text.count('src="data:image/png;base64,') == len(pngs)
    # the claim table replaces report.md's: one coloured row per claims.csv row
    claims = (root / "report" / "claims.csv").read_text().splitlines()
    # (each verdict its own class: a verdict with no class of its own would fall to "other")
    assert sum(text.count(f'<td class="{cls}">') for cls in VERDICT_CLASSES.values()) == 2 * (len(claims) - 1)
    assert '<td class="other">' not in text
    assert "| claim | paper |" not in text
    # the run list: the cpu record counts over the older field, per rule; the warning escaped; every run linked
    row = re.search(r'<tr><td><a href="#run-kind-pie_target-10ms_r1">.*?</tr>', text)
    assert row and '<td class="hot">4</td><td>machine 1, process 3</td><td>1</td>' in row.group(0)
    assert "w &lt;1&gt;" in text
    for d in sorted(p.parent for p in root.glob("*/manifest.json")):
        assert f'href="#run-{d.name}"' in text and f'<div id="run-{d.name}">' in text
    assert "<b>Reason:</b> boom" in text


def test_study_markdown_is_included_and_claims_without_a_slot_are_appended(tmp_path: Path) -> None:
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.md").write_text("# Sweep report: x\n\nNo claims section.\n")
    (report / "claims.csv").write_text("id,verdict,more_needed,more_unit\nc1,contradicts,,\nc2,undecided,7,pairs\n")
    (report / "own.md").write_text("# Own study\n\n## Part\n\ntext\n")
    text = write_report_html(tmp_path, report, study_files=[report / "own.md", report / "summary.csv"]).read_text()
    assert '<td class="contradicts">contradicts</td>' in text and '<td class="undecided">+7 pairs</td>' in text
    assert "Study report: own.md" in text and '<h3 id="s0-own-study">Own study</h3>' in text
    assert "No run folders here" in text


def test_short_point_names_an_axis_value_once() -> None:
    point = {"links.bn1.forward.qdisc.kind": "pie", "links.bn2.forward.qdisc.kind": "pie", "dash.abr": "bola"}
    assert short_point(point) == "kind=pie, abr=bola"
