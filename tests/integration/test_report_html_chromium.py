"""The self-contained report.html in a real browser: headless Chromium opens it from disk, with every host name
unresolvable; no console error, no request but the file itself (figures are data: URIs), every figure decoded,
the verdicts coloured, a run's figures one click away. Screenshots are kept in the test's tmp_path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nest_experiments.pytest_plugin import skip_or_fail
from nest_experiments.reports.plot import plot_folder
from nest_experiments.reports.report_html import VERDICT_CLASSES
from nest_experiments.studies.nest.claims import PAPER_CLAIMS
from tests.integration.cdp_page import chromium
from tests.unit.sweep_synth import RunSpec, make_run, make_sweep

CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NeST study's sweep (3 blocks of PIE vs FQ-PIE at 5 and 10 ms) plus a CPU-saturated run with warnings
    and a failed run, plotted by ``plot``'s own function."""
    root = make_sweep(tmp_path_factory.mktemp("sweep"), reps=3, targets=(5, 10))
    make_run(root, RunSpec(aqm="pie", target_ms=15, repetition=1, cpu_saturated_windows=3,
                           warnings=("CPU saturated (>= 95%) in 3 of 30 1 s windows", "<script>alert(1)</script>")))
    make_run(root, RunSpec(aqm="fq_pie", target_ms=15, repetition=1, status="failed", reason="qemu died"))
    paths = plot_folder(root)
    html = root / "report" / "report.html"
    assert html in paths
    return html


def test_report_html_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    if CHROMIUM is None:
        skip_or_fail("no chromium (setup.sh installs it)")
    sweep = report.parent.parent
    report_pngs = sorted(report.parent.glob("*.png"))
    run_pngs = sorted(set(sweep.glob("*/*.png")) - set(report_pngs))
    # qdisc.png and timeline.png of each completed run (synthetic runs have segments, no iperf3.csv)
    assert len(run_pngs) == 2 * 13 and report_pngs
    with chromium(CHROMIUM, tmp_path / "profile", width=1280, height=1000) as page:
        page.open(report.as_uri())
        top = page.screenshot(tmp_path / "report_top.png")
        images = page.evaluate("Array.from(document.images).map(i => [i.complete && i.naturalWidth > 0, "
                               "i.src.slice(0, 22)])")
        # every figure of the report and of every run is in the page, and decodes (a data: URI of a whole PNG)
        assert len(images) == len(run_pngs) + len(report_pngs)
        assert all(ok and src == "data:image/png;base64," for ok, src in images)
        # every claim's verdict cell carries its verdict's class, and each verdict has its own colour; three
        # blocks of the synthetic sweep decide nothing, so "too few", "uninformative" and "no data" are present
        verdicts = page.evaluate("Array.from(document.querySelectorAll('table.claims tbody tr')).map(tr => "
                                 "[tr.cells[5].className, tr.cells[5].textContent, "
                                 "getComputedStyle(tr.cells[5]).backgroundColor])")
        assert verdicts and all(cls in VERDICT_CLASSES.values() for cls, _, _ in verdicts), verdicts
        assert all(text.startswith(v) for cls, text, _ in verdicts for v, c in VERDICT_CLASSES.items() if c == cls)
        colours = {cls: bg for cls, _, bg in verdicts}
        assert len(colours) >= 3 and len(set(colours.values())) == len(colours), colours
        assert "rgb(255, 255, 255)" not in colours.values()  # none left uncoloured
        claims = page.evaluate("document.querySelector('table.claims').rows.length")
        assert claims == 1 + len(PAPER_CLAIMS)  # a header and the NeST claims
        # the run list: the saturated run flagged, the injected warning shown as text, not run
        assert page.evaluate("document.querySelector('table.runs td.hot') !== null")
        assert page.evaluate("document.body.innerText.includes('<script>alert(1)</script>')")
        assert page.evaluate("document.querySelectorAll('script').length") == 0
        page.evaluate("document.querySelector('table.claims').scrollIntoView()")
        page.screenshot(tmp_path / "report_claims.png")
        page.evaluate("document.querySelector('#runs').scrollIntoView()")
        page.screenshot(tmp_path / "report_runs.png")
        # one click on a run's name opens its section with its figures
        name = "kind-pie_target-15ms_r1"
        assert page.evaluate(f"document.getElementById('run-{name}').closest('details').open") is False
        page.evaluate(f"document.querySelector('table.runs a[href=\"#run-{name}\"]').click()")
        assert page.evaluate(f"document.getElementById('run-{name}').closest('details').open") is True
        assert page.evaluate(f"document.getElementById('run-{name}').querySelectorAll('img').length") == 2  # qdisc, timeline
        page.screenshot(tmp_path / "report_run.png")
        errors, requests = page.console_errors(), page.requests()
    assert errors == []
    assert requests and all(u == report.as_uri() or u.startswith("data:") for u in requests), requests
    for shot in (top, *(tmp_path / f"report_{n}.png" for n in ("claims", "runs", "run"))):
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"screenshots: {tmp_path}")
