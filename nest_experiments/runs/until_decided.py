"""``run --until-decided``: block after block until every claim of the study is decided, or the budget is spent.

The sweep's randomized complete blocks (:mod:`nest_experiments.config.sweep`: block
``k`` is repetition ``k``) are run one at a time. After each block the
study's claims are judged on every session so far (a *look*; alpha is spent
over the looks, :mod:`nest_experiments.analysis.sequential`), the look is
recorded in the sweep's ``sequential.json``, and the next block holds only
the sweep points whose cell an undecided claim needs
(:func:`nest_experiments.analysis.claims.cells_needed`, matched through the
study's ``cell_of``). It stops when no claim is undecided, at ``--max-reps``
blocks, when the next block would not fit in ``--budget`` (its estimate:
the mean wall time of this invocation's runs so far; a block longer than the whole budget starts, runs as many
runs as fit, and is completed by the next invocation: no look is taken on a part of a block,
:func:`nest_experiments.analysis.decisions.judge_folder`), or when a block it ran
gave no undecided claim a session (every run of the claims' cells saturated,
failed or without its pair: the machine, not the claims, is the limit, and
more blocks would spend the budget on nothing). Resume-safe: run the
same command again and the completed runs are skipped, the looks replayed
from the sessions (the same sessions give the same decisions) and the next
block planned as before. Each block runs through the same path as a plain
``run`` (host, VM or ``--cluster``).

Before block 1 the claims are frozen into the sweep's ``preregistration.json`` (:mod:`.preregistration`), unless
the sweep or the evidence it goes on from holds a record: ``claims freeze`` by hand is no longer a step to forget.

On a machine without the results folder, ``--continue-from evidence/<name>`` goes on from the committed evidence
of an earlier sweep: its sessions count as the sweep's (:data:`.decisions.PRIOR_DIR`), its runs are not run again
(:func:`committed_runs`), and the looks are replayed over them as on a resume.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from nest_experiments.analysis import decisions, preregistration
from nest_experiments.analysis.claims import (
    CellNeed,
    Claim,
    Verdict,
    cells_needed,
    judged_sessions,
    left_out,
    verdict_table,
)
from nest_experiments.analysis.sequential import DECIDED
from nest_experiments.config.sweep import RunSpec, expand
from nest_experiments.errors import ConfigError
from nest_experiments.studies import STUDIES, Study

DEFAULT_MAX_REPS = 25  # the NeST paper's repetitions; --max-reps raises or lowers it
Execute = Callable[[list[RunSpec]], int]  # runs one block's runs (skipping completed ones); returns an exit code


@dataclass(frozen=True, kw_only=True)
class Budget:
    seconds: float | None = None  # wall time for this invocation's runs; None: no limit
    max_reps: int = DEFAULT_MAX_REPS

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "max_reps": self.max_reps}


def study_of(experiment: str) -> Study:
    """The study whose claims decide ``experiment``; an experiment without claims cannot run until decided."""
    study = next((s for s in STUDIES.values() if experiment in s.experiments), None)
    if study is None or not study.claims_for(experiment) or study.cell_of is None:
        with_claims = sorted(e for s in STUDIES.values() for e in s.experiments if s.claims_for(e))
        raise ConfigError("--until-decided", f"experiment {experiment!r} has no study with claims to decide; "
                                             f"experiments with claims: {', '.join(with_claims) or 'none'}")
    return study


def block_runs(raw: dict[str, Any], block: int) -> list[RunSpec]:
    """The runs of block ``block`` (repetition ``block`` of every sweep point), in the sweep's order."""
    return [r for r in expand(raw, repetitions=block) if r.repetition == block]


def matches(cell: Mapping[str, Any], need: Mapping[str, Any]) -> bool:
    """A run's cell is in a needed cell: every key the need names has its value (or one of its values)."""
    return all(cell.get(k) in (v if isinstance(v, tuple) else (v,)) for k, v in need.items())


def plan_block(runs: Sequence[RunSpec], needs: Sequence[CellNeed],
               cell_of: Callable[[Mapping[str, Any]], Mapping[str, Any]], runtime: str | None = None) -> list[RunSpec]:
    """The runs of a block that some undecided claim needs (a run counts when its cell is in a needed cell).
    ``runtime``: the one the blocks run on (``host`` | ``vm``), part of a run's cell as in the session table (a claim
    across the RTT names it); None: unknown, and a need that names one matches no run."""
    where = {"runtime": runtime} if runtime else {}
    return [r for r in runs if any(matches({**where, **cell_of(r.experiment.raw)}, n.cell) for n in needs)]


def committed_runs(raw: dict[str, Any], committed: pd.DataFrame | None) -> set[str]:
    """The runs of the committed sessions a sweep goes on from (not run again); each must be a run of its block in
    this sweep, or the evidence was made from another experiment file."""
    if committed is None or committed.empty:
        return set()
    names: set[str] = set()
    for block, group in committed.groupby("block"):
        unknown = sorted(set(group["run"]) - {r.name for r in block_runs(raw, int(block))})
        if unknown:
            raise ConfigError("--continue-from", f"committed session {unknown[0]} (block {block}) is no run of this "
                                                 "sweep: the evidence was made from another experiment file; run "
                                                 "that file, or run this one without --continue-from")
        names |= set(group["run"])
    return names


def undecided(verdicts: Sequence[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if v.verdict not in DECIDED]


def _cost(spent_s: float, traffic_done_s: float, runs: Sequence[RunSpec]) -> float:
    """The wall time ``runs`` will take: their configured durations times this invocation's wall time per second
    of configured duration so far (at least 1: resumed runs that were skipped cost nothing)."""
    ratio = max(1.0, spent_s / traffic_done_s) if traffic_done_s > 0 else 1.0
    return ratio * sum(r.experiment.duration_s for r in runs)


def next_block_fits(budget: Budget, spent_s: float, traffic_done_s: float, next_runs: Sequence[RunSpec]) -> bool:
    """Whether the next block may start: its runs fit in what is left of the budget, or the block is longer than
    the whole budget (no invocation could run it whole: it starts, and its runs go on as far as the budget allows,
    :func:`runs_that_fit`; the next invocation completes it)."""
    if budget.seconds is None:
        return True
    cost = _cost(spent_s, traffic_done_s, next_runs)
    return spent_s + cost <= budget.seconds or cost > budget.seconds


def runs_that_fit(budget: Budget, spent_s: float, traffic_done_s: float, runs: Sequence[RunSpec]) -> int:
    """How many of a block's next ``runs`` (in order) fit in what is left of the budget: all without a budget;
    one at most before this invocation has timed a run (its wall time per second of traffic is not known yet)."""
    if budget.seconds is None:
        return len(runs)
    n = 0
    while n < len(runs) and spent_s + _cost(spent_s, traffic_done_s, runs[:n + 1]) <= budget.seconds:
        n += 1
        if traffic_done_s <= 0:
            break
    return n


def _lost(sessions: pd.DataFrame, block: int, runs: int) -> str:
    """What happened to a block's runs: how many are saturated (out of the claims) or gave no session."""
    mine = sessions[sessions["block"] == block] if not sessions.empty else sessions
    saturated = int(left_out(mine).sum())
    return f"{saturated} of its {runs} run(s) saturated, {max(runs - len(mine), 0)} without a session"


def _freeze_first(folder: Path, study: Study, experiment: str, claims: Sequence[Claim], out: TextIO) -> None:
    """Freeze the claims before block 1 (:mod:`.preregistration`) unless the sweep, or the evidence it goes on
    from, holds a record already: a sweep run until decided is pre-registered without a step to forget."""
    if any((d / preregistration.FROZEN).is_file() for d in (folder, folder / decisions.PRIOR_DIR)):
        return
    path, before = preregistration.freeze_now(folder, study.name, experiment, claims)
    print(f"until decided: {len(claims)} claims frozen {'before any session' if before else 'after its data'} "
          f"in {path}", file=out, flush=True)


def _looked(sessions: pd.DataFrame, block: int) -> pd.DataFrame:
    """The sessions of blocks up to ``block``: what the look after it judges."""
    return sessions[sessions["block"] <= block] if not sessions.empty else sessions


def run_until_decided(raw: dict[str, Any], *, folder: Path, execute: Execute, budget: Budget,
                      out: TextIO = sys.stderr, clock: Callable[[], float] = time.monotonic,
                      study: Study | None = None, runtime: str | None = None, stepwise: bool = True) -> list[Verdict]:
    """Blocks until decided (see the module docstring); returns the last look's verdicts. ``study``: the one whose
    claims decide (default: the experiment's); ``runtime``: the one the blocks run on (:func:`plan_block`);
    ``stepwise``: a block's runs go to ``execute`` as many at a time as fit in the budget (the first alone, to
    time it), so that the budget can end a block part-way (a block longer than a session's budget is completed by
    the next invocation); False (a cluster, which runs a block's runs in parallel): the whole block at once."""
    first = block_runs(raw, 1)
    if not first:
        raise ConfigError("--until-decided", "the sweep has no runs")
    name = first[0].experiment.name
    study = study or study_of(name)
    claims = study.claims_for(name)
    if study.cell_of is None:
        raise ConfigError("--until-decided", f"study {study.name} maps no run to its claims' cells (cell_of)")
    committed = committed_runs(raw, decisions.prior_sessions(folder))
    _freeze_first(folder, study, name, claims, out)
    decisions.start_sequential(folder, alpha=0.05, budget=budget.as_dict())  # sequential before its first look
    started, traffic_s, block = clock(), 0.0, 1
    runs = first
    judged: dict[str, tuple[int | None, ...]] = {}  # what each claim's look after the last block judged
    while True:
        todo = [r for r in runs if r.name not in committed]
        print(f"until decided: block {block}: {len(todo)} run(s)"
              + (f" ({len(runs) - len(todo)} committed before)" if len(todo) < len(runs) else ""), file=out, flush=True)
        done = 0
        while done < len(todo):  # as many runs at a time as fit: the budget can end a block part-way
            n = runs_that_fit(budget, clock() - started, traffic_s, todo[done:]) if stepwise else len(todo)
            if n == 0:
                print(f"until decided: the budget ({budget.seconds:.0f} s) has no room for the rest of block {block} "
                      f"({done} of its {len(todo)} run(s) run): its sessions are kept and judged once the block is "
                      f"complete (a look follows a whole block); run the same command again, or publish with "
                      f"`evidence` and go on with --continue-from, to complete it", file=out, flush=True)
                verdicts = decisions.judge_sweep(claims, _looked(study.sessions(folder), block - 1), sequential=True)
                print(verdict_table(verdicts), file=out, flush=True)
                return verdicts
            execute(todo[done:done + n])
            traffic_s += sum(r.experiment.duration_s for r in todo[done:done + n])
            done += n
        sessions = _looked(study.sessions(folder), block)  # a resumed sweep's later blocks exist already
        verdicts = decisions.judge_sweep(claims, sessions, sequential=True)
        decisions.record_look(folder, alpha=0.05, verdicts=verdicts, block=block, budget=budget.as_dict())
        open_claims = undecided(verdicts)
        print(f"until decided: after block {block}: {len(verdicts) - len(open_claims)} of {len(verdicts)} claims "
              f"decided", file=out, flush=True)
        if not open_claims:
            break
        if block >= budget.max_reps:  # first: the sweep ends here whatever this block gave
            print(f"until decided: --max-reps {budget.max_reps} reached", file=out, flush=True)
            break
        if todo and all(judged.get(v.claim.id) == judged_sessions(v) for v in open_claims):
            print(f"until decided: block {block} gave no undecided claim a session it can use "
                  f"({_lost(sessions, block, len(todo))}): more blocks would likely add nothing (the report's CPU table "
                  "says what saturated, the run list what failed); stopping. Its runs are kept: run the command "
                  "again to go on",
                  file=out, flush=True)
            break
        judged = {v.claim.id: judged_sessions(v) for v in verdicts}
        runs = plan_block(block_runs(raw, block + 1), cells_needed(verdicts), study.cell_of, runtime)
        if not runs:
            print("until decided: the undecided claims name no cell this sweep runs", file=out, flush=True)
            break
        if not next_block_fits(budget, clock() - started, traffic_s, runs):
            print(f"until decided: the budget ({budget.seconds:.0f} s) has no room for block {block + 1}",
                  file=out, flush=True)
            break
        block += 1
    print(verdict_table(verdicts), file=out, flush=True)
    return verdicts
