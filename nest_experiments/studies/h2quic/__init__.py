"""The HTTP/2-QUIC DASH evaluation (Timmerer, docs/papers.md): overhead, link utilization, adaptation.

The study's package: :mod:`.metrics` (its numbers, checks and the blog's thresholds), :mod:`.claims` (the blog's
comparisons as data, judged per session), :mod:`.report` (its own report beside ``report.md``: figures, sections and
the judged claims); this module declares the study (:data:`STUDY`).
"""

from __future__ import annotations

from pathlib import Path

from nest_experiments.studies.base import Study, table_metrics
from nest_experiments.studies.h2quic.claims import PAPER_CLAIMS, cell_of, session_metrics
from nest_experiments.studies.h2quic.metrics import EXPERIMENTS, REPORT_FILE, run_checks


def write_outputs(folder: Path, out_dir: Path) -> list[Path]:
    """``h2quic.md`` and its figures beside the shared report (:mod:`.report`; matplotlib loads here), with the
    claims judged on the sweep."""
    from nest_experiments.studies.h2quic.report import write_report

    return write_report(folder, out_dir, verdicts=STUDY.verdicts(folder))


STUDY = Study(
    name="h2quic",
    title="the HTTP/1.1-TCP vs HTTP/2-TLS vs HTTP/3-QUIC DASH evaluation (overhead, link utilization, adaptation; "
          f"Timmerer, docs/papers.md); its figures and tables: [{REPORT_FILE}]"
          f"({REPORT_FILE})",
    paper="DASH over HTTP/2 and QUIC (Timmerer)",
    experiments=EXPERIMENTS,
    dash_metrics=table_metrics("video.avg_bitrate_kbps", "video.avg_throughput_kbps", "session.stall_s"),
    run_checks=run_checks,
    sanity_rules="Pass rules: the run has video segments; an overhead or utilization run kept one representation "
                 "(abr = 'fixed'); an overhead run has TCP/UDP bytes on the bottleneck in both directions "
                 "(wire.csv).",
    figure_sections=(),
    outputs=write_outputs,
    paper_claims=PAPER_CLAIMS,
    cell_of=cell_of,
    session_metrics=session_metrics,
    evidence_tables=("segments", "qoe", "wire", "rates", "cpu"),
)
