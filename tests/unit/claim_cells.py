"""A study's claims against the runs of an experiment file: does every claim name cells the sweep runs?

The cells come from ``Study.cell_of`` applied to each RunSpec's resolved config (what the runner does to pick the
runs of undecided claims), plus ``block`` (the repetition) and ``runtime`` (the file's; ``auto``, on a kernel without
the qdiscs as CI's: the router runtime for the whole sweep when any of its runs needs a qdisc kind or netem, else the
host; ``runs.runtime.choose`` picks one runtime per sweep).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nest_experiments.analysis.claims import Claim
from nest_experiments.config import read_toml
from nest_experiments.config.sweep import RunSpec, apply_paper, expand
from nest_experiments.net.kernel import features_needed
from nest_experiments.net.routed import ROUTABLE
from nest_experiments.studies import Study

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def runtime(run: RunSpec, sweep: list[RunSpec]) -> str:
    wanted = run.experiment.runtime
    if wanted != "auto":
        return wanted
    lacking = ROUTABLE - {"htb"}  # what a kernel like CI's lacks: the qdiscs and netem (it has HTB)
    return "router" if any(set(features_needed(r.experiment)) & lacking for r in sweep) else "host"


def sweep_cells(study: Study, file: str, *, paper: bool = False) -> pd.DataFrame:
    """One row per run of ``experiments/<file>``: its cell by ``study.cell_of``, block and runtime."""
    assert study.cell_of is not None
    raw = read_toml(EXPERIMENTS / file)
    runs = expand(apply_paper(raw) if paper else raw)
    return pd.DataFrame([{"run": r.name, "block": r.repetition, "runtime": runtime(r, runs),
                          **study.cell_of(r.experiment.raw)} for r in runs])


def _rows(cells: pd.DataFrame, cell: dict[str, object]) -> pd.DataFrame:
    mask = pd.Series(True, index=cells.index)
    for axis, value in cell.items():
        if axis not in cells.columns:
            return cells.iloc[0:0]
        mask &= cells[axis].isin(value if isinstance(value, tuple) else (value,))
    return cells[mask]


def problems(claims: tuple[Claim, ...], cells: pd.DataFrame) -> list[str]:
    """Claims whose arm (under its conditions) no run of the sweep is in, or whose paired arms share no key."""
    out = []
    for c in claims:
        arms = [_rows(cells, {**c.conditions, **arm}) for arm in ((c.a,) if c.one_sample else (c.a, c.b))]
        for name, rows in zip("ab", arms, strict=False):
            if rows.empty:
                out.append(f"{c.id}: arm {name} {dict(getattr(c, name))} under {dict(c.conditions)}: no run")
        key = list(c.strata + c.pair_by)
        if c.paired and not c.one_sample and all(not r.empty for r in arms):
            if not set(key) <= set(cells.columns):
                out.append(f"{c.id}: pair key {key} is not a column of the cells")
                continue
            keys = [set(map(tuple, r[key].astype(str).to_numpy())) for r in arms]
            if not keys[0] & keys[1]:
                out.append(f"{c.id}: no pair (no {key} in both arms)")
    return out
