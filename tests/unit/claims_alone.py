"""A study's claims judged on a synthetic sweep each at the full alpha (a family of its own): the declarations
checked against planted truths, apart from the family's multiplicity control (Holm, tested in
tests/unit/test_family.py), which at the few sessions such sweeps hold would leave every claim too few. A weakening against the reports,
which judge each claim inside its paper's family (Holm's steps at 0.05 / k for k claims still open): these tests
check the declarations, not the family's spending, which tests/unit/test_family.py checks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nest_experiments.analysis import decisions
from nest_experiments.analysis.claims import Verdict
from nest_experiments.rundir import experiment_name
from nest_experiments.studies import Study


def each_alone(study: Study, folder: Path) -> list[Verdict]:
    claims = [replace(c, family="", family_size=0) for c in study.claims_for(experiment_name(folder))]
    return decisions.judge_sweep(claims, study.sessions(folder), sequential=decisions.is_sequential(folder))
