"""The NeST paper's study (Naik, docs/papers.md): PIE vs FQ-PIE under DASH over MPTCP.

What its report adds to the shared machinery: the paper's figure numbers on
the per-stream metrics (Figs. 2-11) and the queue-delay figures (Figs.
12-13), and its acceptance checks: PIE holds its delay near its target,
FQ-PIE (whose delay the kernel does not report) has a measured series, both
bottlenecks carried DASH bytes (MPTCP on both paths), and the background
apps worked; and the paper's findings as claims (:mod:`.claims`: FQ-PIE vs
PIE, paired within a block at each target).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from nest_experiments.analysis.axes import AQM_AT_TARGET, CellKey
from nest_experiments.analysis.report import DASH_METRICS, CellCheck, Check, RunInput, RunResult
from nest_experiments.analysis.report_checks import (
    app_checks,
    dash_split_checks,
    fq_pie_checks,
    pie_cell_checks,
    pie_checks,
)
from nest_experiments.studies.base import Derived, Study
from nest_experiments.studies.nest.claims import PAPER_CLAIMS, RTT_SIZE_RHO, cell_of, rtt_size_rho, session_metrics

PIE_DELAY_BAND = (0.5, 2.0)  # kernel-reported mean / target
MIN_BOTTLENECK_SHARE = 0.10
PAPER_FIGURES = {
    "video.switches": 2, "video.avg_bitrate_kbps": 3, "video.avg_throughput_kbps": 4, "video.avg_buffer_s": 5,
    "video.app_rtt_ms": 6, "video.app_jitter_ms": 7, "audio.avg_throughput_kbps": 8, "audio.avg_buffer_s": 9,
    "audio.app_rtt_ms": 10, "audio.app_jitter_ms": 11,
}
METRICS = tuple(replace(m, figure=PAPER_FIGURES.get(m.key)) for m in DASH_METRICS)


def run_checks(run: RunInput) -> list[Check]:
    return (pie_checks(run.egresses, run.delay_means, PIE_DELAY_BAND) + fq_pie_checks(run.egresses, run.delay_means)
            + dash_split_checks(run, MIN_BOTTLENECK_SHARE) + app_checks(run))


def cell_checks(runs: Sequence[RunResult], cell: CellKey) -> list[CellCheck]:
    return pie_cell_checks(runs, cell, PIE_DELAY_BAND)


STUDY = Study(
    name="nest",
    title="the NeST paper (PIE vs FQ-PIE, DASH over MPTCP; Naik, docs/papers.md)",
    paper="PIE vs FQ-PIE for DASH over MPTCP (Naik)",
    experiments=("nest_paper",),
    axes=AQM_AT_TARGET,  # the AQM compared at each target; the other swept keys are the context
    dash_metrics=METRICS,
    run_checks=run_checks,
    cell_checks=cell_checks,
    sanity_rules="Pass rules: PIE's mean delay as the kernel reports it within 0.5x-2x of its target; FQ-PIE has a "
                 "measured queue-delay series (`qdelay.csv`); each AQM bottleneck carried >= 10% of the DASH bytes "
                 "(MPTCP subflows, `subflows.csv`); every iperf3 flow moved data; >= 90% of attempted SIPp calls "
                 "succeeded; httperf's reply rate >= 90% of its request rate. A check that could not be made (file "
                 "absent) fails and says why.",
    figure_sections=(("Video (cf. paper Figs. 2-7)", "video"), ("Audio (cf. paper Figs. 8-11)", "audio")),
    delay_reference=" (cf. paper Figs. 12-13)",
    paper_claims=PAPER_CLAIMS,
    cell_of=cell_of,
    session_metrics=session_metrics,
    evidence_tables=("qoe", "segments", "qdisc", "subflows", "iperf3_summary", "sipp", "httperf", "cpu"),
    derived=(Derived(RTT_SIZE_RHO, "segments", rtt_size_rho),),  # Fig. 6 within each session
)
