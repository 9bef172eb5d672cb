"""What a run and a sweep come to, for whoever ran them (the runner, the VM, a cluster): the run's config text
(``config.toml``: what says whether a folder holds this run), its outcome, the sweep's summary line."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nest_experiments.config.sweep import RunSpec
from nest_experiments.rundir import dump_toml


@dataclass(frozen=True)
class RunOutcome:
    name: str
    status: str  # completed, failed, interrupted, skipped
    reason: str
    seconds: float
    run_dir: Path


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def config_text(spec: RunSpec) -> str:
    raw = dict(spec.experiment.raw)
    raw["run"] = {"name": spec.name, "repetition": spec.repetition, "seed": spec.seed}
    return dump_toml(raw)


def sweep_summary(outcomes: Sequence[RunOutcome], seconds: float, folder: Path) -> str:
    count = {s: sum(o.status == s for o in outcomes) for s in ("completed", "skipped", "failed")}
    return (f"{count['completed']} completed, {count['skipped']} skipped, {count['failed']} failed in {seconds:.0f} s; "
            f"results in {folder}")


def saturation_summary(folder: Path) -> str:
    """The last line of ``run`` (after the sweep and its plots, on the host for a VM sweep, after the last block
    with ``--until-decided``): how many of the sweep's sessions were CPU-saturated and what that leaves its claims
    (:meth:`nest_experiments.studies.Study.saturation`, the claims' own rule), and where the report is."""
    from nest_experiments.reports.report_md import REPORT_DIR, REPORT_MD
    from nest_experiments.studies import study_for

    headline = study_for(folder).saturation(folder).headline()
    return f"{headline}; see {folder / REPORT_DIR / REPORT_MD}"


class _HasStatus(Protocol):
    @property
    def status(self) -> str: ...


def exit_code(outcomes: Sequence[_HasStatus]) -> int:
    """The ``run`` command's exit status: 1 when a run failed."""
    return 1 if any(o.status == "failed" for o in outcomes) else 0
