"""The "under the hood" study (``quic-dash-under-the-hood.txt``): objects, DASH segments, two parallel streams.

The study's package: :mod:`.metrics` (its numbers, checks and claims), :mod:`.report` (its own
report beside ``report.md``: figures and sections); this module declares the study (:data:`STUDY`).
"""

from __future__ import annotations

from pathlib import Path

from nest_experiments.studies.base import Study
from nest_experiments.studies.under_hood.metrics import (
    DASH,
    OBJECTS,
    PARALLEL,
    REPORT_FILE,
    claims,
    run_checks,
)


def write_outputs(folder: Path, out_dir: Path) -> list[Path]:
    """``under_hood.md`` and its CDF figures (:mod:`.report`; matplotlib loads there)."""
    from nest_experiments.studies.under_hood.report import write_report

    return write_report(folder, out_dir)


STUDY = Study(
    name="under_hood",
    title="\"Looking under the hood\" (object downloads, DASH segments, two parallel streams; TCP vs QUIC; "
          f"../shared/papers/quic-dash-under-the-hood.txt); its CDFs, U tests and fairness: [{REPORT_FILE}]"
          f"({REPORT_FILE})",
    experiments=(OBJECTS, DASH, PARALLEL),
    dash_metrics=(),
    run_checks=run_checks,
    sanity_rules="Pass rules: every planned object arrived, or the DASH session played to the end (no such warning "
                 f"in the manifest). Objects and segments that overlap a CPU-saturated second are left out of the study's "
                 f"statistics ({REPORT_FILE}).",
    figure_sections=(),
    claims=claims,
    outputs=write_outputs,
)
