"""The report's figures as a reader sees them: axis ranges, panels, target lines, labels that do not collide."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from nest_experiments.analysis import report, report_figures
from nest_experiments.analysis.axes import AQM_COLORS
from nest_experiments.reports.report_md import write_sweep_report
from tests.unit.sweep_synth import make_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _profile(aqm: str, target: str, source: str, steady_ms: float, *, spike_ms: float = 400.0) -> report.Profile:
    t = tuple(k + 0.5 for k in range(30))
    mean = tuple(spike_ms if k < 2 else steady_ms for k in range(30))  # a start-up spike in the first two bins
    return report.Profile(egress="bn1 r1->r3", source=source, compared=aqm, at=target, context=(), t=t, mean=mean,
                          low=tuple(v * 0.9 for v in mean), high=tuple(v * 1.1 for v in mean), runs=4, band="95% CI",
                          steady=(2.0, 29.0))


@pytest.fixture
def delay_fig() -> Figure:
    profiles = [_profile("pie", "5ms", "kernel", 4.0), _profile("pie", "5ms", "capture", 4.5),
                _profile("fq_pie", "5ms", "capture", 9.0), _profile("pie", "15ms", "kernel", 13.0),
                _profile("fq_pie", "15ms", "capture", 25.0)]
    fig = report_figures.draw_delay(profiles, "bn1 r1->r3", ["pie", "fq_pie"], ["5ms", "15ms"], ())
    yield fig
    plt.close(fig)


def test_steady_top_leaves_out_the_start_up_spike() -> None:
    top, peak, peak_t = report_figures.steady_top([_profile("fq_pie", "5ms", "capture", 9.0)], 5.0)
    assert top == pytest.approx(9.0 * 1.1 * 1.2)  # the steady band's top + 20%
    assert (peak, peak_t) == (pytest.approx(440.0), 0.5)
    assert report_figures.steady_top([_profile("pie", "15ms", "kernel", 3.0)], 15.0)[0] == pytest.approx(18.0)


def test_queue_delay_has_one_panel_per_target_scaled_to_the_steady_window(delay_fig: Figure) -> None:
    axes = delay_fig.axes
    assert [ax.get_title().splitlines()[0] for ax in axes] == ["target 5ms (PIE n=4, FQ-PIE n=4)",
                                                             "target 15ms (PIE n=4, FQ-PIE n=4)"]
    assert axes[0].get_ylim() == pytest.approx((0.0, 9.0 * 1.1 * 1.2))  # not 0-440 ms
    assert axes[1].get_ylim() == pytest.approx((0.0, 25.0 * 1.1 * 1.2))
    for ax, target in zip(axes, (5.0, 15.0), strict=True):
        assert "start-up peak 440 ms at 0.5 s, clipped" in ax.get_title()
        dotted = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
        assert len(dotted) == 1 and set(dotted[0].get_ydata()) == {target}
        assert {ln.get_label() for ln in ax.get_lines()} >= {"PIE, kernel (qdisc.csv)",
                                                            "FQ-PIE, measured: capture (qdelay.csv)"}
    # one legend for the figure, each entry once; PIE keeps its bar-chart color
    legend = delay_fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == [
        "PIE, kernel (qdisc.csv)", "PIE, measured: capture (qdelay.csv)", "FQ-PIE, measured: capture (qdelay.csv)",
        "target"]
    pie = next(ln for ln in axes[0].get_lines() if ln.get_label().startswith("PIE"))
    assert pie.get_color() == AQM_COLORS["pie"]


def test_no_clipping_mark_without_a_spike() -> None:
    fig = report_figures.draw_delay([_profile("pie", "5ms", "kernel", 4.0, spike_ms=4.0)], "e", ["pie"], ["5ms"], ())
    assert "clipped" not in fig.axes[0].get_title() and fig.axes[0].get_ylim()[1] == pytest.approx(6.0)  # target x 1.2
    plt.close(fig)


def _overlap(fig: Figure, a: object, b: object) -> bool:
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    return bool(a.get_window_extent(renderer).overlaps(b.get_window_extent(renderer)))  # type: ignore[attr-defined]


def test_bar_chart_x_label_clears_the_ci_note_and_the_legend_clears_the_bars(tmp_path: Path) -> None:
    sweep = report.load_sweep(make_sweep(tmp_path, reps=4))
    rows = [r for r in report.table(sweep) if r.metric.key == "video.qoe"]
    fig = report_figures.draw_bars(rows, rows[0].metric, sweep.compared, ())
    report_figures.layout(fig, footnote=report_figures.BAR_NOTE)
    fig.canvas.draw()
    ax = fig.axes[0]
    note = next(t for t in fig.texts if t.get_text() == report_figures.BAR_NOTE)
    assert not _overlap(fig, ax.xaxis.label, note)
    legend = ax.get_legend()
    assert not any(_overlap(fig, legend, bar) for bar in ax.patches)
    plt.close(fig)


def test_report_figures_are_valid_pngs(tmp_path: Path) -> None:
    paths = write_sweep_report(make_sweep(tmp_path, reps=4, targets=(5, 10)))
    pngs = [p for p in paths if p.suffix == ".png"]
    assert {p.name for p in pngs} >= {"fig02_video_switches.png", "video_qoe.png", "audio_response_latency_ms.png",
                                      "qdelay_bn1_r1_r3.png", "qdelay_bn2_r2_r4.png"}
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC
        height, width, _ = plt.imread(png).shape
        assert width > 600 and height > 400, png.name
    assert not list((tmp_path / "synth" / "report").glob(".*.tmp.png"))
