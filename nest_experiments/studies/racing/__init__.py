"""The QUIC/TCP connection-racing study (Chaudhary et al., docs/papers.md): sessions, the paper's claims per pair.

The study's package: :mod:`.sessions` (its sessions, checks and the paper's shares of sessions, from :mod:`.metrics`),
:mod:`.claims` (the paper's comparisons as data, judged per session pair), :mod:`.report` (its own report beside
``report.md``: figures, sections and the judged claims); this module declares the study (:data:`STUDY`).
"""

from __future__ import annotations

from pathlib import Path

from nest_experiments.studies.base import Study, table_metrics
from nest_experiments.studies.racing.claims import PAPER_CLAIMS, cell_of, session_metrics
from nest_experiments.studies.racing.sessions import EXPERIMENTS, REPORT_FILE, run_checks


def write_outputs(folder: Path, out_dir: Path) -> list[Path]:
    from nest_experiments.studies.racing.report import write_report

    return write_report(folder, out_dir, verdicts=STUDY.verdicts(folder))


STUDY = Study(
    name="racing",
    title="QUIC/TCP connection racing (Chaudhary et al., docs/papers.md): RQvsT per pattern "
          f"(Fig. 14), its cross-correlation with quality drops and stalls (Fig. 9), the policies compared: "
          f"[{REPORT_FILE}]({REPORT_FILE})",
    paper="QUIC-TCP connection racing (Chaudhary et al.)",
    experiments=EXPERIMENTS,
    dash_metrics=table_metrics("video.avg_bitrate_kbps", "video.switches", "session.stall_s"),
    run_checks=run_checks,
    sanity_rules="Pass rules: the run's racing.csv has events; its qoe.json says how the session ended. Sessions "
                 f"that did not reach the end are kept (their stalls happened; {REPORT_FILE} lists them).",
    figure_sections=(),
    outputs=write_outputs,
    paper_claims=PAPER_CLAIMS,
    cell_of=cell_of,
    session_metrics=session_metrics,
    evidence_tables=("racing", "segments", "qoe", "firewall", "cpu"),
)
