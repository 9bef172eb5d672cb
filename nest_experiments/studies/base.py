"""What a study brings to the shared report: its metrics, checks, figure references and claims."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from nest_experiments.analysis import decisions, preregistration, report
from nest_experiments.analysis.axes import AQM_AT_TARGET, Axes
from nest_experiments.analysis.claims import Claim as PaperClaim
from nest_experiments.analysis.claims import Verdict, in_families
from nest_experiments.analysis.report import CellCheck, CellChecks, Metric, RunChecks, RunResult, Sweep
from nest_experiments.rundir import experiment_name


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One line of a study's "paper's claim | ours | agree?" table."""

    claim: str
    ours: str
    agree: str  # "yes", "no", or why it cannot be told (e.g. "too few repetitions")


OutputsFn = Callable[[Path, Path], list[Path]]  # (sweep folder, report folder) -> files written


@dataclass(frozen=True)
class Derived:
    """A within-session metric of the session table computed from one of a run's tables alone (``of``: that run's
    rows of ``table``, a :func:`nest_experiments.results.load` frame the evidence keeps, to the value): the study's
    ``session_metrics`` computes it from the run folder's file, ``evidence --derive`` from an evidence folder's
    committed table, with the same function (a folder exported before the metric existed gains its column)."""

    metric: str
    table: str
    of: Callable[[pd.DataFrame], float | None]


def table_metrics(*keys: str) -> tuple[Metric, ...]:
    """The shared report's table for a study of one run per context: these per-run numbers, no bar charts."""
    return tuple(replace(m, plot=False) for m in report.DASH_METRICS if m.key in keys)



@dataclass(frozen=True, kw_only=True)
class Study:
    """A paper's study: the experiments it reports, and what its report adds to the shared machinery."""

    name: str
    title: str  # one line in the report's head
    paper: str = ""  # the paper's short name (docs/papers.md lists each with its authors, title and venue)
    experiments: tuple[str, ...]  # ``[experiment] name`` values whose sweeps get this report
    axes: Axes = AQM_AT_TARGET  # what the shared report compares, at what, the rest its context
    dash_metrics: tuple[Metric, ...] = report.DASH_METRICS  # order and paper figure numbers
    run_checks: RunChecks = report.no_checks
    cell_checks: CellChecks = report.no_cell_checks
    sanity_rules: str = "No sanity checks."  # the pass rules, as the report states them
    figure_sections: tuple[tuple[str, str], ...] = (("Video", "video"), ("Audio", "audio"))  # heading, stream
    delay_reference: str = ""  # appended to the queue-delay headings, e.g. " (cf. paper Figs. 12-13)"
    outputs: OutputsFn | None = None  # the study's own files beside report.md (``plot`` writes them after it)
    # the paper's claims as data, judged on the per-session table (nest_experiments.analysis.decisions)
    paper_claims: tuple[PaperClaim, ...] = ()
    cell_of: decisions.CellFn | None = None  # a run's resolved config -> the values its claims name
    session_metrics: decisions.MetricsFn | None = None  # a run folder -> its per-session metrics
    # the frames of results.load an evidence folder keeps (nest_experiments.reports.evidence; runs and metrics always)
    evidence_tables: tuple[str, ...] = ("qoe", "segments", "cpu")
    derived: tuple[Derived, ...] = ()  # session metrics an evidence folder's tables give again (evidence --derive)

    def sessions(self, folder: Path) -> pd.DataFrame:
        """The sweep's per-session table (:func:`.decisions.session_table`)."""
        if self.cell_of is None or self.session_metrics is None:
            return pd.DataFrame()
        return decisions.session_table(folder, cell_of=self.cell_of, metrics=self.session_metrics)

    def claims_for(self, experiment: str) -> tuple[PaperClaim, ...]:
        """The claims a sweep of ``experiment`` judges: a study of several experiments names each claim's in its
        conditions (``experiment = "..."``, a column of its ``cell_of``); a claim naming none belongs to all. Each
        in its family (:meth:`family_of`), whose false decisions are bounded together (Holm,
        :func:`nest_experiments.analysis.claims.step_down`)."""
        def named(value: object) -> bool:
            return value is None or value == experiment or (isinstance(value, tuple) and experiment in value)

        return in_families(self.name, self.paper_claims,
                           [c for c in self.paper_claims if named(c.conditions.get("experiment"))])

    def verdicts(self, folder: Path) -> list[Verdict]:
        """The paper's claims judged on the sweep in ``folder`` (sequentially when it was run until decided)."""
        claims = preregistration.marked(folder, self.claims_for(experiment_name(folder)))
        return decisions.judge_folder(claims, self.sessions(folder), folder)

    def saturation(self, folder: Path) -> decisions.Saturation:
        """How many of the sweep's sessions are CPU-saturated, and what that leaves its claims."""
        return decisions.sweep_saturation(folder, claims=len(self.claims_for(experiment_name(folder))))

    def load_sweep(self, folder: Path) -> Sweep:
        return report.load_sweep(folder, checks=self.run_checks, dash_metrics=self.dash_metrics, axes=self.axes)

    def load_run(self, run_dir: Path) -> RunResult:
        return report.load_run(run_dir, self.run_checks, self.axes)

    def sweep_cell_checks(self, sweep: Sweep) -> list[CellCheck]:
        return report.cell_checks(sweep, self.cell_checks)
