"""A sweep's results as numbers: per-run metrics, cells, statistics (the shared report machinery).

Pure: reads run folders (DESIGN.md §4) only, never touches the network.
:mod:`nest_experiments.reports.report_md` writes them as Markdown,
:mod:`nest_experiments.analysis.report_figures` draws them and
:mod:`nest_experiments.analysis.report_checks` holds the sanity checks. What a paper's
study adds (its figure numbers, which checks, its claims) lives in
:mod:`nest_experiments.studies`, which passes it in: this module imports no study.

- A run's *point* (its swept keys, without the repetition) is flattened to
  dotted keys and split by the study's axes (:mod:`nest_experiments.analysis.axes`): the value it compares,
  the value it compares at, and the context (the other keys). The NeST paper's (the default): the AQM (every
  key ending in ``qdisc.kind``; without one, the non-FIFO qdisc of the run's egresses in ``links.json``) at
  each target (every key ending in ``qdisc.target``).
- A *cell* is (context, at, compared): the repetitions of one point.
- DASH metrics per stream come from :func:`nest_experiments.dash.core.qoe.summarize`
  on ``segments.csv`` (the figures the player writes to ``qoe.json``), among
  them the response latency (TTFB: ``t_first_byte - t_request``) and the QoE of
  the ABR paper's eq. (1) (per stream with its own stalls, and the session's sum); queue delays are means over the steady window
  (:func:`nest_experiments.analysis.results.steady_window`) of the kernel's
  ``delay_ms`` (``qdisc.csv``) and of each measured method (``qdelay.csv``)
  on every egress that carries the run's AQM. The files are read by :mod:`nest_experiments.analysis.results`
  (through :class:`nest_experiments.rundir.RunFolder`, the one reader of run folders; also behind the public
  ``results.load`` for users' own analyses).
- Sanity checks are the study's (:data:`RunChecks`, given to :func:`load_run`).
- Estimates: mean and a 95% confidence interval with Student's t over
  repetitions; comparisons: two-sided Mann-Whitney U. Fewer than
  :data:`MIN_REPS` values in a group: no interval and no p-value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from nest_experiments.analysis import decisions
from nest_experiments.analysis.axes import AQM_AT_TARGET, Axes, CellKey, Context
from nest_experiments.analysis.results import (  # noqa: F401  (re-exported: the studies and report modules import them here)
    BIN_S,
    DASH_METRICS,
    NOT_AQM,
    STREAMS,
    AqmEgress,
    Metric,
    Series,
    aqm_egresses,
    bottleneck_links,
    dash_metrics,
    delay_metric,
    flatten,
    queue_delays,
    raw_egresses,
    run_dirs,
    steady_window,
)
from nest_experiments.analysis.stats import MIN_REPS, Estimate, estimate, mann_whitney_p, present
from nest_experiments.errors import NestExpError
from nest_experiments.rundir import read_manifest

# ---------------------------------------------------------------- run folders



@dataclass(frozen=True, kw_only=True)
class Check:
    """One sanity check on one run (or cell): ``status`` is ``pass`` or ``fail``."""

    name: str
    subject: str
    status: str
    detail: str
    value: float | None = None  # the figure checked, in ``unit`` (for ranges over a cell)
    unit: str = ""


@dataclass(frozen=True, kw_only=True)
class RunResult:
    name: str
    path: Path
    status: str
    reason: str = ""
    repetition: int = 0
    point: dict[str, str] = field(default_factory=dict)
    compared: str = "-"  # the value of the study's compared axis (the NeST paper's: the AQM)
    at: str = "-"  # the value of the axis it is compared at (the NeST paper's: the target)
    context: Context = ()
    metrics: dict[str, float] = field(default_factory=dict)
    delay_metrics: tuple[Metric, ...] = ()
    series: tuple[Series, ...] = ()
    egresses: tuple[AqmEgress, ...] = ()
    checks: tuple[Check, ...] = ()
    notes: tuple[str, ...] = ()  # missing files and other gaps in the data
    warnings: tuple[str, ...] = ()
    cpu: dict[str, Any] = field(default_factory=dict)
    saturated_windows: int = 0  # CPU-saturated 1 s windows of its traffic, every rule (decisions.saturated_windows)
    window: tuple[float, float] | None = None  # the steady window (results.steady_window), completed runs

    @property
    def completed(self) -> bool:
        return self.status == "completed"


@dataclass(frozen=True, kw_only=True)
class RunInput:
    """What a run's sanity checks see: the folder, its AQM egresses and bottlenecks, its steady delay means."""

    run_dir: Path
    egresses: tuple[AqmEgress, ...]
    bottlenecks: tuple[str, ...]  # links that carry the AQM (without one: the shaped links)
    delay_means: dict[Metric, float]


RunChecks = Callable[[RunInput], list[Check]]


def no_checks(run: RunInput) -> list[Check]:
    return []


def ok(passed: bool) -> str:
    return "pass" if passed else "fail"



def load_run(run_dir: Path, checks: RunChecks = no_checks, axes: Axes = AQM_AT_TARGET) -> RunResult:
    """Everything the report needs from one run folder, with the study's ``checks`` and keyed by its ``axes``;
    missing files become notes."""
    m = read_manifest(run_dir) or {}
    status = str(m.get("status", "unknown (no readable manifest.json)"))
    base = RunResult(name=run_dir.name, path=run_dir, status=status, reason=str(m.get("reason", "")),
                     repetition=int(m.get("repetition", 0) or 0), point=flatten(m.get("point") or {}),
                     warnings=tuple(str(w) for w in m.get("warnings") or ()),
                     cpu={k: v for k, v in m.items() if k.startswith(("cpu_", "host_"))},
                     saturated_windows=_saturated_windows(m))
    if status != "completed":
        return base
    try:
        return _completed_run(run_dir, base, checks, axes)
    except (OSError, ValueError, KeyError, TypeError, pd.errors.ParserError) as exc:
        return replace(base, status="completed, unreadable", reason=f"{type(exc).__name__}: {exc}")


def _saturated_windows(manifest: dict[str, Any]) -> int:
    try:
        return decisions.saturated_windows(manifest)
    except (TypeError, ValueError):  # a manifest's cpu record of the wrong shape: the run list says what it holds
        return 0


def _completed_run(run_dir: Path, base: RunResult, checks: RunChecks, axes: Axes) -> RunResult:
    notes: list[str] = []
    raw = raw_egresses(run_dir, notes)
    egs = aqm_egresses(raw, base.point)
    metrics = dash_metrics(run_dir, notes)
    window = steady_window(run_dir)
    series, delay_means = queue_delays(run_dir, egs, window, notes)
    metrics.update({m.key: v for m, v in delay_means.items()})
    done = checks(RunInput(run_dir=run_dir, egresses=tuple(egs), bottlenecks=tuple(bottleneck_links(raw, egs)),
                           delay_means=delay_means))
    return replace(base, compared=axes.compared.value(base.point, egs), at=axes.at.value(base.point, egs),
                   context=axes.context(base.point), metrics=metrics, delay_metrics=tuple(delay_means),
                   series=tuple(series), egresses=tuple(egs), checks=tuple(done), notes=tuple(notes), window=window)






# ---------------------------------------------------------------- the sweep




@dataclass(frozen=True, kw_only=True)
class Row:
    """One line of the comparison table: a metric at one (context, at), every compared value."""

    metric: Metric
    context: Context
    at: str
    estimates: dict[str, Estimate]  # compared value -> estimate
    p_values: dict[tuple[str, str], float | None]  # (compared value a, b) -> p


@dataclass(frozen=True, kw_only=True)
class Sweep:
    folder: Path
    runs: tuple[RunResult, ...]
    dash_metrics: tuple[Metric, ...] = DASH_METRICS  # the study's, in its order
    axes: Axes = AQM_AT_TARGET  # the study's

    @property
    def completed(self) -> list[RunResult]:
        return [r for r in self.runs if r.completed]

    @property
    def excluded(self) -> list[RunResult]:
        return [r for r in self.runs if not r.completed]

    @property
    def compared(self) -> list[str]:
        """The compared axis's values, in its order."""
        return self.axes.compared.order({r.compared for r in self.completed})

    @property
    def ats(self) -> list[str]:
        """The values of the axis compared at, in its order."""
        return self.axes.at.order({r.at for r in self.completed})

    @property
    def contexts(self) -> list[Context]:
        return sorted({r.context for r in self.completed})

    @property
    def metrics(self) -> list[Metric]:
        """DASH metrics any run has, then every queue-delay metric, in a stable order."""
        present = {k for r in self.completed for k in r.metrics}
        delays = {m.key: m for r in self.completed for m in r.delay_metrics}
        return [m for m in self.dash_metrics if m.key in present] + [delays[k] for k in sorted(delays)]

    def cell(self, context: Context, at: str, compared: str) -> list[RunResult]:
        return [r for r in self.completed if (r.context, r.at, r.compared) == (context, at, compared)]

    def cells(self) -> list[CellKey]:
        """Every (context, at, compared), in the report's order."""
        return [(c, at, v) for c in self.contexts for at in self.ats for v in self.compared]

    def pairs(self) -> list[tuple[str, str]]:
        return list(itertools.combinations(self.compared, 2))


def load_sweep(folder: Path, *, checks: RunChecks = no_checks, dash_metrics: tuple[Metric, ...] = DASH_METRICS,
               axes: Axes = AQM_AT_TARGET) -> Sweep:
    """Every run folder below ``folder``, each with the study's ``checks``, keyed by its ``axes``."""
    dirs = run_dirs(folder)
    if not dirs:
        raise NestExpError(f"{folder}: no run folder (a folder with manifest.json) here")
    return Sweep(folder=folder, runs=tuple(load_run(d, checks, axes) for d in dirs), dash_metrics=dash_metrics,
                 axes=axes)


def table(sweep: Sweep) -> list[Row]:
    rows = []
    for metric in sweep.metrics:
        for context in sweep.contexts:
            for at in sweep.ats:
                values = {v: [r.metrics.get(metric.key) for r in sweep.cell(context, at, v)] for v in sweep.compared}
                if not any(present(v) for v in values.values()):
                    continue
                rows.append(Row(metric=metric, context=context, at=at,
                                estimates={a: estimate(v) for a, v in values.items()},
                                p_values={(a, b): mann_whitney_p(values[a], values[b]) for a, b in sweep.pairs()}))
    return rows


# ---------------------------------------------------------------- per-cell summaries


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Queue delay over time of one cell on one egress from one source: mean and band over repetitions."""

    egress: str
    source: str
    compared: str
    at: str
    context: Context
    t: tuple[float, ...]
    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    runs: int
    band: str  # "95% CI" or "min-max"
    steady: tuple[float, float] | None = None  # from the latest steady start to the latest steady end of its runs


def profiles(sweep: Sweep) -> list[Profile]:
    out = []
    for context, at, compared in sweep.cells():
        runs = sweep.cell(context, at, compared)
        ids = sorted({(s.egress, s.source) for r in runs for s in r.series})
        out += [_profile(runs, eg, src, cell=(context, at, compared)) for eg, src in ids]
    return out


def _profile(runs: Sequence[RunResult], egress: str, source: str, *, cell: CellKey) -> Profile:
    per_bin: dict[float, list[float]] = {}
    count = 0
    for r in runs:
        for s in (s for s in r.series if (s.egress, s.source) == (egress, source)):
            count += 1
            for t, v in zip(s.t, s.delay_ms, strict=True):
                per_bin.setdefault(t, []).append(v)
    ts = sorted(per_bin)
    ests = [estimate(per_bin[t]) for t in ts]
    ci = count >= MIN_REPS
    low = [e.low if ci and e.low is not None else min(per_bin[t]) for t, e in zip(ts, ests, strict=True)]
    high = [e.high if ci and e.high is not None else max(per_bin[t]) for t, e in zip(ts, ests, strict=True)]
    windows = [r.window for r in runs if r.window is not None]
    steady = (max(w[0] for w in windows), max(w[1] for w in windows)) if windows else None
    context, at, compared = cell
    return Profile(egress=egress, source=source, compared=compared, at=at, context=context, t=tuple(ts), steady=steady,
                   mean=tuple(float(e.mean or 0.0) for e in ests), low=tuple(low), high=tuple(high),
                   runs=count, band="95% CI" if ci else "min-max")


@dataclass(frozen=True, kw_only=True)
class CellCheck:
    """A sanity check summed over a cell's runs."""

    context: Context
    at: str
    compared: str
    name: str
    passed: int
    total: int
    detail: str

    @property
    def status(self) -> str:
        return ok(self.total > 0 and self.passed == self.total)


CellChecks = Callable[[Sequence[RunResult], CellKey], list[CellCheck]]


def no_cell_checks(runs: Sequence[RunResult], cell: CellKey) -> list[CellCheck]:
    return []


def cell_checks(sweep: Sweep, extra: CellChecks = no_cell_checks) -> list[CellCheck]:
    """Every run check summed over each cell, then the study's ``extra`` checks on the cell as a whole."""
    out = []
    for cell in sweep.cells():
        runs = sweep.cell(*cell)
        names = list(dict.fromkeys(c.name for r in runs for c in r.checks))
        out += [_cell_check(runs, name, cell=cell) for name in names]
        out += extra(runs, cell)
    return out


def _cell_check(runs: Sequence[RunResult], name: str, *, cell: CellKey) -> CellCheck:
    checks = [c for r in runs for c in r.checks if c.name == name]
    failed = sorted({r.name for r in runs for c in r.checks if c.name == name and c.status != "pass"})
    values = [c.value for c in checks if c.value is not None]
    parts = [f"{min(values):.3g}-{max(values):.3g} {checks[0].unit}"] if values else []
    parts += [f"failed in {', '.join(failed)}"] if failed else []
    detail = "; ".join(parts)
    context, at, compared = cell
    return CellCheck(context=context, at=at, compared=compared, name=name, total=len(checks),
                     passed=sum(c.status == "pass" for c in checks), detail=detail)
