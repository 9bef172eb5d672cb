"""What is published from a sweep: its report (Markdown, HTML, figures), its evidence folder, the claim maps.

The layer above the studies: it picks a sweep's study (:func:`nest_experiments.studies.study_for`) and writes
what the study and the analysis computed. Pure (files in, files out; never the network); imported only by the
command line and the orchestration (:mod:`nest_experiments.runs`).

- :mod:`.report_md`: the sweep report, ``<sweep>/report/report.md`` with its PNGs and ``summary.csv``.
- :mod:`.report_html`: the same as one self-contained ``report/report.html``.
- :mod:`.plot`: per-run PNGs and ``plot`` on a folder (a sweep or an evidence folder).
- :mod:`.evidence`: evidence folders (a sweep exported for committing) and the README's generated table;
  :mod:`.evidence_report`: an evidence folder's report and figure.
- :mod:`.claimmap`: a paper's claim map (``docs/claims/<study>.md``): its finding sentences and the claims
  declared for them.
"""
