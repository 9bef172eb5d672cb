"""Studies: one package per paper (``nest``, ``abr_quic``, ``under_hood``, ``h2quic``, ``racing``; ``generic`` for
any other experiment), each owning its metrics, checks, figure references, claims and report sections.

A sweep's report is the study whose ``experiments`` list the sweep's
experiment name (``[experiment] name`` in a run's ``config.toml``, else the
folder's name); any other experiment gets :data:`generic.STUDY`. Studies
import the report machinery (:mod:`nest_experiments.analysis`), which imports no study. What is above them
(:mod:`nest_experiments.reports`, :mod:`nest_experiments.runs`, the command line) imports only this package:
:data:`STUDIES`, :func:`study_for`, the :class:`Study` type, never a study's own module
(``tests/unit/test_import_rules.py``). No study imports another: what two share lives in
:mod:`nest_experiments.analysis`.
"""

from __future__ import annotations

from pathlib import Path

from nest_experiments.rundir import experiment_name
from nest_experiments.studies import abr_quic, generic, h2quic, nest, racing, under_hood
from nest_experiments.studies.base import Claim, Study

__all__ = ["STUDIES", "Claim", "Study", "experiment_name", "study_for"]

STUDIES: dict[str, Study] = {s.name: s for s in (nest.STUDY, abr_quic.STUDY, under_hood.STUDY, h2quic.STUDY, racing.STUDY,
                                                    generic.STUDY)}


def study_for(folder: Path) -> Study:
    name = experiment_name(folder)
    return next((s for s in STUDIES.values() if name in s.experiments), generic.STUDY)
