"""The "under the hood" study (Under the hood, docs/papers.md): objects, DASH segments, two parallel streams.

The study's package: :mod:`.metrics` (its samples, descriptions and checks), :mod:`.claims` (the paper's claims as
data, judged per session), :mod:`.report` (its own report beside ``report.md``: figures, descriptive tables and the
judged claims); this module declares the study (:data:`STUDY`).
"""

from __future__ import annotations

from pathlib import Path

from nest_experiments.studies.base import Study
from nest_experiments.studies.under_hood.claims import PAPER_CLAIMS, cell_of, session_metrics
from nest_experiments.studies.under_hood.metrics import DASH, OBJECTS, PARALLEL, REPORT_FILE, run_checks


def write_outputs(folder: Path, out_dir: Path) -> list[Path]:
    """``under_hood.md`` and its CDF figures (:mod:`.report`; matplotlib loads there)."""
    from nest_experiments.studies.under_hood.report import write_report

    return write_report(folder, out_dir)


STUDY = Study(
    name="under_hood",
    title="\"Looking under the hood\" (object downloads, DASH segments, two parallel streams; TCP vs QUIC; "
          f"Under the hood, docs/papers.md); its CDFs and fairness: [{REPORT_FILE}]"
          f"({REPORT_FILE})",
    paper="QUIC and DASH under the hood",
    experiments=(OBJECTS, DASH, PARALLEL),
    dash_metrics=(),
    run_checks=run_checks,
    sanity_rules="Pass rules: every planned object arrived, or the DASH session played to the end (no such warning "
                 f"in the manifest). The claims leave out CPU-saturated sessions; the descriptive CDFs leave out the "
                 f"objects and segments that overlap a CPU-saturated second ({REPORT_FILE}).",
    figure_sections=(),
    outputs=write_outputs,
    paper_claims=PAPER_CLAIMS,
    cell_of=cell_of,
    session_metrics=session_metrics,
    evidence_tables=("objects", "segments", "qoe", "cpu"),
)
