"""A sweep's results as numbers: per-run metrics, cells, statistics (the shared report machinery).

Pure: reads run folders (DESIGN.md §4) only, never touches the network.
:mod:`nest_experiments.analysis.report_md` writes them as Markdown,
:mod:`nest_experiments.analysis.report_figures` draws them and
:mod:`nest_experiments.analysis.report_checks` holds the sanity checks. What a paper's
study adds (its figure numbers, which checks, its claims) lives in
:mod:`nest_experiments.studies`, which passes it in: this module imports no study.

- A run's *point* (its swept keys, without the repetition) is flattened to
  dotted keys. The AQM of a run is the value of every key ending in
  ``qdisc.kind`` (several keys with one value count once); its target the
  value of every key ending in ``qdisc.target``; the other keys are its
  *context*. Without a swept kind, the AQM is the non-FIFO qdisc of the
  run's egresses (``links.json``).
- A *cell* is (context, target, AQM): the repetitions of one point.
- DASH metrics per stream come from :func:`nest_experiments.dash.qoe.summarize`
  on ``segments.csv`` (the figures the player writes to ``qoe.json``), among
  them the response latency (TTFB: ``t_first_byte - t_request``) and the QoE of
  the ABR paper's eq. (1) (per stream with its own stalls, and the session's sum); queue delays are means over the steady window
  (:func:`nest_experiments.results.steady_window`) of the kernel's
  ``delay_ms`` (``qdisc.csv``) and of each measured method (``qdelay.csv``)
  on every egress that carries the run's AQM. The files are read by :mod:`nest_experiments.results` (the one
  reader of run folders, also the public API for users' own analyses).
- Sanity checks are the study's (:data:`RunChecks`, given to :func:`load_run`).
- Estimates: mean and a 95% confidence interval with Student's t over
  repetitions; comparisons: two-sided Mann-Whitney U. Fewer than
  :data:`MIN_REPS` values in a group: no interval and no p-value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

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
from nest_experiments.units import parse_time

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
    aqm: str = "-"
    target: str = "-"
    context: tuple[tuple[str, str], ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)
    delay_metrics: tuple[Metric, ...] = ()
    series: tuple[Series, ...] = ()
    egresses: tuple[AqmEgress, ...] = ()
    checks: tuple[Check, ...] = ()
    notes: tuple[str, ...] = ()  # missing files and other gaps in the data
    warnings: tuple[str, ...] = ()
    cpu: dict[str, Any] = field(default_factory=dict)
    window: tuple[float, float] | None = None  # the steady window (analysis.steady_window), completed runs

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



def _joined(point: dict[str, str], suffix: str) -> str | None:
    values = sorted({v for k, v in point.items() if k.endswith(suffix)})
    return "+".join(values) if values else None


def load_run(run_dir: Path, checks: RunChecks = no_checks) -> RunResult:
    """Everything the report needs from one run folder, with the study's ``checks``; missing files become notes."""
    m = read_manifest(run_dir) or {}
    status = str(m.get("status", "unknown (no readable manifest.json)"))
    base = RunResult(name=run_dir.name, path=run_dir, status=status, reason=str(m.get("reason", "")),
                     repetition=int(m.get("repetition", 0) or 0), point=flatten(m.get("point") or {}),
                     warnings=tuple(str(w) for w in m.get("warnings") or ()),
                     cpu={k: v for k, v in m.items() if k.startswith(("cpu_", "host_"))})
    if status != "completed":
        return base
    try:
        return _completed_run(run_dir, base, checks)
    except (OSError, ValueError, KeyError, TypeError, pd.errors.ParserError) as exc:
        return replace(base, status="completed, unreadable", reason=f"{type(exc).__name__}: {exc}")


def _completed_run(run_dir: Path, base: RunResult, checks: RunChecks) -> RunResult:
    notes: list[str] = []
    raw = raw_egresses(run_dir, notes)
    egs = aqm_egresses(raw, base.point)
    kinds = sorted({e.kind for e in egs})
    aqm = _joined(base.point, "qdisc.kind") or ("+".join(kinds) if kinds else "-")
    target = _joined(base.point, "qdisc.target") or _egress_target(egs)
    context = tuple(sorted((k, v) for k, v in base.point.items()
                           if not k.endswith("qdisc.kind") and not k.endswith("qdisc.target")))
    metrics = dash_metrics(run_dir, notes)
    window = steady_window(run_dir)
    series, delay_means = queue_delays(run_dir, egs, window, notes)
    metrics.update({m.key: v for m, v in delay_means.items()})
    done = checks(RunInput(run_dir=run_dir, egresses=tuple(egs), bottlenecks=tuple(bottleneck_links(raw, egs)),
                           delay_means=delay_means))
    return replace(base, aqm=aqm, target=target, context=context, metrics=metrics, delay_metrics=tuple(delay_means),
                   series=tuple(series), egresses=tuple(egs), checks=tuple(done), notes=tuple(notes), window=window)


def _egress_target(egs: Sequence[AqmEgress]) -> str:
    targets = sorted({e.target_ms for e in egs if e.target_ms is not None})
    return "+".join(f"{t:g}ms" for t in targets) if targets else "-"




# ---------------------------------------------------------------- the sweep


CellKey = tuple[tuple[tuple[str, str], ...], str, str]  # context, target, aqm


@dataclass(frozen=True, kw_only=True)
class Row:
    """One line of the comparison table: a metric at one (context, target), every AQM."""

    metric: Metric
    context: tuple[tuple[str, str], ...]
    target: str
    estimates: dict[str, Estimate]  # aqm -> estimate
    p_values: dict[tuple[str, str], float | None]  # (aqm a, aqm b) -> p


@dataclass(frozen=True, kw_only=True)
class Sweep:
    folder: Path
    runs: tuple[RunResult, ...]
    dash_metrics: tuple[Metric, ...] = DASH_METRICS  # the study's, in its order

    @property
    def completed(self) -> list[RunResult]:
        return [r for r in self.runs if r.completed]

    @property
    def excluded(self) -> list[RunResult]:
        return [r for r in self.runs if not r.completed]

    @property
    def aqms(self) -> list[str]:
        return order_aqms({r.aqm for r in self.completed})

    @property
    def targets(self) -> list[str]:
        return order_targets({r.target for r in self.completed})

    @property
    def contexts(self) -> list[tuple[tuple[str, str], ...]]:
        return sorted({r.context for r in self.completed})

    @property
    def metrics(self) -> list[Metric]:
        """DASH metrics any run has, then every queue-delay metric, in a stable order."""
        present = {k for r in self.completed for k in r.metrics}
        delays = {m.key: m for r in self.completed for m in r.delay_metrics}
        return [m for m in self.dash_metrics if m.key in present] + [delays[k] for k in sorted(delays)]

    def cell(self, context: tuple[tuple[str, str], ...], target: str, aqm: str) -> list[RunResult]:
        return [r for r in self.completed if (r.context, r.target, r.aqm) == (context, target, aqm)]

    def pairs(self) -> list[tuple[str, str]]:
        return list(itertools.combinations(self.aqms, 2))


def load_sweep(folder: Path, *, checks: RunChecks = no_checks,
               dash_metrics: tuple[Metric, ...] = DASH_METRICS) -> Sweep:
    """Every run folder below ``folder``, each with the study's ``checks``."""
    dirs = run_dirs(folder)
    if not dirs:
        raise NestExpError(f"{folder}: no run folder (a folder with manifest.json) here")
    return Sweep(folder=folder, runs=tuple(load_run(d, checks) for d in dirs), dash_metrics=dash_metrics)


def order_aqms(aqms: Iterable[str]) -> list[str]:
    """PIE first, then FQ-PIE, then the rest by name."""
    rank = {"pie": 0, "fq_pie": 1}
    return sorted(aqms, key=lambda a: (rank.get(a, 2), a))


def order_targets(targets: Iterable[str]) -> list[str]:
    """By duration when every part reads as one (``5ms`` < ``10ms``), else by name."""
    def key(t: str) -> tuple[int, float, str]:
        try:
            return (0, sum(parse_time("target", p) for p in t.split("+")), t)
        except NestExpError:
            return (1, 0.0, t)
    return sorted(targets, key=key)


def target_ms(target: str) -> float | None:
    try:
        return parse_time("target", target) * 1e3
    except NestExpError:
        return None


def table(sweep: Sweep) -> list[Row]:
    rows = []
    for metric in sweep.metrics:
        for context in sweep.contexts:
            for target in sweep.targets:
                values = {a: [r.metrics.get(metric.key) for r in sweep.cell(context, target, a)] for a in sweep.aqms}
                if not any(present(v) for v in values.values()):
                    continue
                rows.append(Row(metric=metric, context=context, target=target,
                                estimates={a: estimate(v) for a, v in values.items()},
                                p_values={(a, b): mann_whitney_p(values[a], values[b]) for a, b in sweep.pairs()}))
    return rows


# ---------------------------------------------------------------- per-cell summaries


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Queue delay over time of one cell on one egress from one source: mean and band over repetitions."""

    egress: str
    source: str
    aqm: str
    target: str
    context: tuple[tuple[str, str], ...]
    t: tuple[float, ...]
    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    runs: int
    band: str  # "95% CI" or "min-max"
    steady: tuple[float, float] | None = None  # from the latest steady start to the latest steady end of its runs


def profiles(sweep: Sweep) -> list[Profile]:
    out = []
    for context in sweep.contexts:
        for target in sweep.targets:
            for aqm in sweep.aqms:
                runs = sweep.cell(context, target, aqm)
                ids = sorted({(s.egress, s.source) for r in runs for s in r.series})
                out += [_profile(runs, eg, src, aqm=aqm, target=target, context=context) for eg, src in ids]
    return out


def _profile(runs: Sequence[RunResult], egress: str, source: str, *, aqm: str, target: str,
             context: tuple[tuple[str, str], ...]) -> Profile:
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
    return Profile(egress=egress, source=source, aqm=aqm, target=target, context=context, t=tuple(ts), steady=steady,
                   mean=tuple(float(e.mean or 0.0) for e in ests), low=tuple(low), high=tuple(high),
                   runs=count, band="95% CI" if ci else "min-max")


@dataclass(frozen=True, kw_only=True)
class CellCheck:
    """A sanity check summed over a cell's runs."""

    context: tuple[tuple[str, str], ...]
    target: str
    aqm: str
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
    for context in sweep.contexts:
        for target in sweep.targets:
            for aqm in sweep.aqms:
                runs = sweep.cell(context, target, aqm)
                names = list(dict.fromkeys(c.name for r in runs for c in r.checks))
                out += [_cell_check(runs, name, context=context, target=target, aqm=aqm) for name in names]
                out += extra(runs, (context, target, aqm))
    return out


def _cell_check(runs: Sequence[RunResult], name: str, *, context: tuple[tuple[str, str], ...], target: str,
                aqm: str) -> CellCheck:
    checks = [c for r in runs for c in r.checks if c.name == name]
    failed = sorted({r.name for r in runs for c in r.checks if c.name == name and c.status != "pass"})
    values = [c.value for c in checks if c.value is not None]
    parts = [f"{min(values):.3g}-{max(values):.3g} {checks[0].unit}"] if values else []
    parts += [f"failed in {', '.join(failed)}"] if failed else []
    detail = "; ".join(parts)
    return CellCheck(context=context, target=target, aqm=aqm, name=name, total=len(checks),
                     passed=sum(c.status == "pass" for c in checks), detail=detail)
