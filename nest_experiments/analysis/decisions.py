"""A study's claims judged on a sweep: the per-session table, and the verdicts (fixed-size or sequential).

The session is the unit of replication (DESIGN §5): one row per completed run
of the sweep, with

- ``run`` (the run's name), ``block`` (its repetition: the sweep's
  randomized complete blocks, see :mod:`nest_experiments.config.sweep`) and
  ``runtime`` (``host`` | ``router`` | ``vm``: a claim across an axis such as the RTT pairs by it, or names one
  runtime in its conditions, DESIGN §5);
- the study's cell columns (:data:`CellFn`: from the run's resolved config to
  the values its claims name: ``aqm``, ``target``, ``transport``, ``abr``,
  ``trace`` ...), the same function the runner uses to pick the runs of the
  cells that undecided claims need (``run --until-decided``);
- the study's per-session metrics (:data:`MetricsFn`);
- ``saturated``: the run had a CPU-saturated 1 s window, by the machine rule
  or the per-process rule (the manifest's ``cpu`` record; older runs: its
  ``cpu_saturated_windows``). Claims leave such sessions out and count them.

A sweep run with ``--until-decided`` says so in :data:`SEQUENTIAL_FILE` (the
rule, alpha, the looks); its verdicts are then the replay of its looks
(:func:`.claims.replay`: alpha spent over the looks); any other sweep had its
size fixed before it was judged, and is judged once at alpha.

A sweep may go on from committed evidence (``run --until-decided --continue-from evidence/<name>``): the evidence
folder is copied into the sweep folder as :data:`PRIOR_DIR`, and the session table is then its ``sessions.csv``
followed by the sweep's own completed runs (both read as CSV, so a cell reads the same from either). A run folder
named like a committed session is an error: the sweep would count that session twice.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from nest_experiments.analysis.claims import Claim, Value, Verdict, evaluate, left_out, replay
from nest_experiments.errors import NestExpError
from nest_experiments.rundir import RunFolder, run_dirs, write_json

SEQUENTIAL_FILE = "sequential.json"  # in the sweep folder: written by run --until-decided
PRIOR_DIR = "prior"  # in the sweep folder: the evidence folder it goes on from (run --continue-from)
PRIOR_SESSIONS = "sessions.csv"  # an evidence folder's session table (reports.evidence.SESSIONS)
CellFn = Callable[[Mapping[str, Any]], dict[str, Value]]
MetricsFn = Callable[[RunFolder], Mapping[str, float | None]]


def saturated_windows(manifest: Mapping[str, Any]) -> int:
    """CPU-saturated 1 s windows of a run's traffic, by every rule the manifest records (machine, process, qemu
    thread).

    A window that starts at or after the run's duration (``saturated_t``: the window's end, so ``t - 1 >=
    duration_s``) does not count. By then the traffic is over: the players and tools stopped at the duration,
    and what is left is their post-processing (the Chromium driver parsing its NetLog kept one CPU busy for
    ~2 s after every racing_chromium session) or a tool's last retransmissions. Those windows stay in the
    manifest and in the report's run list."""
    cpu = manifest.get("cpu")
    if isinstance(cpu, Mapping) and "saturated_windows" in cpu:
        times, duration = cpu.get("saturated_t"), manifest.get("duration_s")
        if isinstance(times, list) and isinstance(duration, int | float):
            return sum(1 for t in times if float(t) - 1.0 < float(duration) - 1e-9)
        return int(cpu["saturated_windows"] or 0)
    return int(manifest.get("cpu_saturated_windows") or 0)


def is_saturated(manifest: Mapping[str, Any]) -> bool:
    """Whether a run's session is CPU-saturated (the session table's ``saturated``, which every claim leaves out):
    one saturated 1 s window of its traffic (:func:`saturated_windows`) is enough."""
    return saturated_windows(manifest) > 0


@dataclass(frozen=True, kw_only=True)
class Saturation:
    """How many of a sweep's sessions are CPU-saturated, and what that leaves its claims (``claims``: how many the
    sweep judges; 0 for an experiment without claims)."""

    sessions: int
    saturated: int
    claims: int

    @property
    def judged(self) -> int:
        """The sessions the claims are judged on: the unsaturated ones."""
        return self.sessions - self.saturated

    def headline(self) -> str:
        """One line for the end of ``run`` and the first line of a report, e.g. "12 of 12 sessions CPU-saturated: no
        claim judged (...)", "3 of 12 sessions CPU-saturated: claims judged on 9 sessions (...)", "0 of 12 sessions
        CPU-saturated: every session counts"."""
        if self.sessions == 0:
            return "no completed session" + (": no claim judged" if self.claims else "")
        head = f"{self.saturated} of {self.sessions} sessions CPU-saturated"
        if self.saturated == 0:
            return f"{head}: every session counts"
        why = "shaped by this machine's CPU, not the network"
        if not self.claims:
            return (f"{head}: their windows were {why} (this experiment has no claims to leave them out of: the "
                    "report's tables include them)")
        if self.judged == 0:
            return f"{head}: no claim judged (their windows were {why})"
        return (f"{head}: claims judged on {self.judged} session{'s' if self.judged != 1 else ''} (the "
                f"{self.saturated} left out: their windows were {why})")


def saturation(sessions: pd.DataFrame, *, claims: int) -> Saturation:
    """:class:`Saturation` of a per-session table (a sweep's :func:`session_table` or an evidence folder's
    ``sessions.csv``), by the claims' own rule (:func:`.claims.left_out`)."""
    return Saturation(sessions=len(sessions), saturated=int(left_out(sessions).sum()), claims=claims)


def sweep_saturation(folder: Path, *, claims: int) -> Saturation:
    """:class:`Saturation` of the sweep in ``folder``: the rows of its :func:`session_table` (the sessions the
    claims are judged on, a prior's committed ones too), without the study's cells or metrics."""
    return saturation(session_table(folder, cell_of=lambda _: {}, metrics=lambda _: {}), claims=claims)


def session_table(folder: Path, *, cell_of: CellFn, metrics: MetricsFn) -> pd.DataFrame:
    """One row per completed run of the sweep ``folder`` (see the module docstring)."""
    rows = []
    for run_dir in run_dirs(folder):
        run = RunFolder(run_dir)
        manifest = run.manifest()
        if manifest is None or manifest.get("status") != "completed":
            continue
        rows.append({"run": run.name, "block": int(manifest.get("repetition") or 1),
                     "runtime": manifest.get("runtime"), **cell_of(run.config()),
                     "saturated": is_saturated(manifest), **metrics(run)})
    table = pd.DataFrame(rows)
    prior = prior_sessions(folder)
    if prior is None:
        return table
    twice = sorted(set(prior["run"]) & set(table["run"])) if rows else []
    if twice:
        raise NestExpError(f"{folder}: run folder {twice[0]} is also a session of {folder / PRIOR_DIR}'s "
                           f"{PRIOR_SESSIONS} (the evidence this sweep goes on from): move the run folder away")
    return pd.concat([prior, as_read(table)], ignore_index=True) if rows else prior


def read_sessions(path: Path | io.StringIO) -> pd.DataFrame:
    """A committed ``sessions.csv`` as the evaluator reads it: only empty fields are missing values (a cell named
    "None" or "NA" stays a string)."""
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def as_read(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` as :func:`read_sessions` would read it back from its CSV (types and missing values alike)."""
    return read_sessions(io.StringIO(table.to_csv(index=False)))


def prior_sessions(folder: Path) -> pd.DataFrame | None:
    """The committed sessions the sweep ``folder`` goes on from (:data:`PRIOR_DIR`), or None."""
    path = folder / PRIOR_DIR / PRIOR_SESSIONS
    return read_sessions(path) if path.is_file() else None


def is_sequential(folder: Path) -> bool:
    return (folder / SEQUENTIAL_FILE).exists()


def looked_through(folder: Path) -> int | None:
    """The block of a sequential sweep's last look (0 before its first), None for a sweep not run until decided."""
    path = folder / SEQUENTIAL_FILE
    if not path.exists():
        return None
    return max((int(look["block"]) for look in json.loads(path.read_text()).get("looks", [])), default=0)


def in_progress(folder: Path, sessions: pd.DataFrame) -> tuple[int, int] | None:
    """A sequential sweep's block cut short by its budget: (block, its sessions so far), or None. Its sessions wait
    for the look that follows the whole block (:func:`judge_folder`)."""
    through = looked_through(folder)
    if through is None or sessions.empty or "block" not in sessions.columns:
        return None
    later = sessions[sessions["block"] > through]
    return (int(later["block"].min()), len(later)) if not later.empty else None


def judge_folder(claims: Sequence[Claim], sessions: pd.DataFrame, folder: Path) -> list[Verdict]:
    """The claims on the sweep (or evidence) ``folder``'s sessions: the replay of its looks when it was run until
    decided, its sessions of a block not yet complete left out (:func:`in_progress`); else one analysis."""
    through = looked_through(folder)
    if through is None:
        return judge_sweep(claims, sessions, sequential=False)
    if not sessions.empty and "block" in sessions.columns:
        sessions = sessions[sessions["block"] <= through]
    return judge_sweep(claims, sessions, sequential=True)


def judge_sweep(claims: Sequence[Claim], sessions: pd.DataFrame, *, sequential: bool,
                alpha: float = 0.05) -> list[Verdict]:
    """The claims' verdicts: the replay of a sequential run's looks, or one fixed-size analysis at ``alpha``."""
    if sessions.empty:
        sessions = pd.DataFrame(columns=["run", "block", "saturated"])
    missing = sorted({col for c in claims for col in _columns(c)} - set(sessions.columns))
    for col in missing:  # a sweep without the cells a claim names: the claim has no data, not an error
        sessions = sessions.assign(**{col: float("nan")})
    if sequential:
        return replay(claims, sessions, alpha=alpha)
    return evaluate(claims, sessions, alpha=alpha)


def _columns(c: Claim) -> set[str]:
    return {c.metric, *c.a, *c.b, *c.conditions, *c.pair_by, *c.strata, *c.worst_over,
            *([c.per] if c.per else []), *(axis for cell in c.exclude for axis in cell)}


def record_look(folder: Path, *, alpha: float, verdicts: Sequence[Verdict], block: int,
                budget: Mapping[str, Any]) -> None:
    """Add a look to the sweep's :data:`SEQUENTIAL_FILE` (the rule, alpha, and per look the block and each claim's
    verdict): the record that the sweep is sequential, and what was decided when."""
    path = folder / SEQUENTIAL_FILE
    doc = _sequential_doc(path, alpha, budget)
    looks = [look for look in doc["looks"] if look["block"] != block]  # a resumed sweep looks again: once a block
    doc["looks"] = [*looks, {"block": block, "verdicts": {v.claim.id: v.verdict for v in verdicts}}]
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, doc)


def start_sequential(folder: Path, *, alpha: float, budget: Mapping[str, Any]) -> None:
    """Mark ``folder`` a sequential sweep before its first look (:data:`SEQUENTIAL_FILE` with no looks, or its
    looks kept): a block its budget cuts short is then judged with the looks, not as a fixed-size sweep."""
    path = folder / SEQUENTIAL_FILE
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, _sequential_doc(path, alpha, budget))


def _sequential_doc(path: Path, alpha: float, budget: Mapping[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {
        "rule": "alpha spending alpha_k = alpha * 6 / (pi^2 k^2) over each claim's looks (union bound)",
        "alpha": alpha, "looks": []}
    doc["budget"] = dict(budget)
    return doc


def verdict_rows(verdicts: Sequence[Verdict]) -> list[dict[str, Any]]:
    """The verdicts as tidy rows (``claims.csv``): one per claim."""
    out = []
    for v in verdicts:
        c = v.claim
        out.append({
            "id": c.id, "figure": c.figure, "statement": c.statement, "paper_value": c.paper_value,
            "metric": c.metric, "a": _cell(c.a), "b": _cell(c.b), "reference": c.reference,
            "conditions": _cell(c.conditions),
            "expect": c.expect, "margin": c.margin, "margin_relative": c.margin_relative, "scale": c.scale,
            "share": c.share, "paper_share": c.paper_share, "per": c.per, "worst_over": ", ".join(c.worst_over), "verdict": v.verdict, "effect": v.effect,
            "ci_low": v.ci[0] if v.ci else None, "ci_high": v.ci[1] if v.ci else None, "ci_level": v.ci_level,
            "p": v.p, "alpha": v.alpha, "test": v.test, "n_a": v.n_a, "n_b": v.n_b, "n_pairs": v.n_pairs,
            "saturated_excluded": v.n_saturated_excluded, "more_needed": v.more_needed,
            "more_unit": v.more_unit, "look": v.look, "note": v.note, "kind": c.kind, "family": c.family,
            "margin_source": c.margin_source if c.margin is not None else "", "post_hoc": c.post_hoc,
            "family_size": v.family_size, "family_alpha": v.family_alpha, "family_open": v.family_open,
            "all_effect": v.all_effect, "all_ci_low": v.all_ci[0] if v.all_ci else None,
            "all_ci_high": v.all_ci[1] if v.all_ci else None, "all_n": v.all_n,
        })
    return out


def _cell(cell: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in cell.items())
