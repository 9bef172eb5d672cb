"""What happens after a run: reading run folders into numbers, statistics, claims judged, the report's pieces.

Pure (files in, files out; never the network). Imports nothing of the system side (net, procs, vm, apps,
collectors, runner) and nothing of the studies or the reports above it: a paper's own numbers live in
:mod:`nest_experiments.studies`, what is published (report.md, report.html, evidence folders) in
:mod:`nest_experiments.reports`.

- :mod:`.results`: a sweep's run folders as tidy frames (``results.load``, the public API, also
  :mod:`nest_experiments.results`) and the per-run readers the report uses (steady window, AQM egresses, DASH
  metrics, queue delays).
- :mod:`.utilization`: per-egress link utilisation, backlog, drops; the summary printed after a sweep.
- :mod:`.stats`: estimates with confidence intervals, the Mann-Whitney U test, p-value text.
- :mod:`.markdown`: Markdown tables.
- :mod:`.report`, :mod:`.report_checks`, :mod:`.report_figures`: the shared sweep report's numbers, checks and
  figures, the vocabulary the studies write theirs in (written out by :mod:`nest_experiments.reports.report_md`).
- :mod:`.claims`, :mod:`.sequential`, :mod:`.ranktests`, :mod:`.decisions`, :mod:`.preregistration`: claims
  as data and their evaluation, alpha spent over looks, exact rank tests, a study's verdicts, frozen declarations.
- :mod:`.qdelay`: captured packets matched into per-packet queue delay.
- :mod:`.wire_bytes`: bytes on the wire per protocol from a pcap.
- :mod:`.tracecheck`: delivered vs trace per window (trace fidelity).
"""
