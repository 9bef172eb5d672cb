"""Studies: one module per paper, each owning its metrics, checks, figure references and claims.

A sweep's report is the study whose ``experiments`` list the sweep's
experiment name (``[experiment] name`` in a run's ``config.toml``, else the
folder's name); any other experiment gets :data:`generic.STUDY`. Studies
import the report machinery; the machinery imports only :func:`study_for`.
"""

from __future__ import annotations

from pathlib import Path

from nest_experiments.rundir import RunFolder, run_dirs
from nest_experiments.studies import abr_quic, generic, h2quic, nest, racing, under_hood
from nest_experiments.studies.base import Claim, Study

__all__ = ["STUDIES", "Claim", "Study", "experiment_name", "study_for"]

STUDIES: dict[str, Study] = {s.name: s for s in (nest.STUDY, abr_quic.STUDY, under_hood.STUDY, h2quic.STUDY, racing.STUDY,
                                                    generic.STUDY)}


def experiment_name(folder: Path) -> str:
    """The experiment of a sweep folder: its first readable run config's ``[experiment] name``, else the folder's."""
    for run_dir in run_dirs(folder):
        try:
            name = RunFolder(run_dir).config()["experiment"]["name"]
        except (KeyError, TypeError):
            continue
        return str(name)
    return folder.name


def study_for(folder: Path) -> Study:
    name = experiment_name(folder)
    return next((s for s in STUDIES.values() if name in s.experiments), generic.STUDY)
