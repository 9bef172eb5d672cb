"""The ABR-over-QUIC-vs-TCP study (Mondal & Chakraborty, docs/papers.md): ABR x transport, Figs. 2-5 and section IV.

The study's package: :mod:`.claims` (the paper's claims as data), :mod:`.metrics` (its per-session numbers and
cells, checks, noise floor), :mod:`.report` (its own report beside ``report.md``: figures and sections); this module
declares the study (:data:`STUDY`).
"""

from __future__ import annotations

from pathlib import Path

from nest_experiments.studies.abr_quic.claims import PAPER_CLAIMS
from nest_experiments.studies.abr_quic.metrics import EXPERIMENT, REPORT_FILE, cell_of, run_checks, session_metrics
from nest_experiments.studies.base import Study, table_metrics


def write_outputs(folder: Path, out_dir: Path) -> list[Path]:
    """``abr_quic.md`` and its figures beside the shared report (:mod:`.report`; matplotlib loads here), with the
    paper's claims judged."""
    from nest_experiments.studies.abr_quic.report import write_report

    return write_report(folder, out_dir, verdicts=STUDY.verdicts(folder))


STUDY = Study(
    name="abr_quic",
    title="the ABR-over-QUIC-vs-TCP letter (ABR x HTTP/1.1-TCP vs HTTP/3-QUIC; Mondal & Chakraborty, docs/papers.md)"
          f"; its box plots (Figs. 2-5), noise floor and estimate-vs-trace figures: [{REPORT_FILE}]"
          f"({REPORT_FILE})",
    paper="ABR over QUIC vs TCP (Mondal, Chakraborty)",
    experiments=(EXPERIMENT,),
    dash_metrics=table_metrics("video.avg_bitrate_kbps", "video.switches", "session.stall_s"),
    run_checks=run_checks,
    sanity_rules="Pass rules: the session played to the end (qoe.json end_reason 'ended'); the origin was Caddy for "
                 "every transport (manifest versions). CPU-saturated runs are listed below and left out of the "
                 f"claims ({REPORT_FILE}).",
    figure_sections=(),
    outputs=write_outputs,
    paper_claims=PAPER_CLAIMS,
    cell_of=cell_of,
    session_metrics=session_metrics,
    evidence_tables=("qoe", "segments", "abr_decisions", "rates", "cpu"),
)
