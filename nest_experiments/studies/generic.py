"""The report of a user's own experiment: the shared metrics and the checks that hold for any experiment."""

from __future__ import annotations

from collections.abc import Sequence

from nest_experiments.analysis.axes import AQM_AT_TARGET, CellKey
from nest_experiments.analysis.report import CellCheck, Check, RunInput, RunResult
from nest_experiments.analysis.report_checks import app_checks, pie_cell_checks, pie_checks
from nest_experiments.studies.base import Study

PIE_DELAY_BAND = (0.5, 2.0)  # kernel-reported mean / target (DESIGN.md §2b: PIE holds at or below its target)


def run_checks(run: RunInput) -> list[Check]:
    return pie_checks(run.egresses, run.delay_means, PIE_DELAY_BAND) + app_checks(run)


def cell_checks(runs: Sequence[RunResult], cell: CellKey) -> list[CellCheck]:
    return pie_cell_checks(runs, cell, PIE_DELAY_BAND)


STUDY = Study(
    name="generic",
    title="no paper's study: the shared metrics and checks",
    experiments=(),
    axes=AQM_AT_TARGET,
    run_checks=run_checks,
    cell_checks=cell_checks,
    sanity_rules="Pass rules: PIE's mean delay as the kernel reports it within 0.5x-2x of its target; every iperf3 "
                 "flow moved data; >= 90% of attempted SIPp calls succeeded; httperf's reply rate >= 90% of its "
                 "request rate. A check that could not be made (file absent) fails and says why.",
)
