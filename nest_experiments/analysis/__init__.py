"""What happens after a run: reading run folders into numbers, statistics, the sweep report and its figures.

Pure (files in, files out; never the network). Imports nothing of the system side (net, procs, vm, apps,
collectors, runner); a paper's own numbers live in :mod:`nest_experiments.studies`.

- :mod:`.results`: a sweep's run folders as tidy frames (``results.load``, the public API, also
  :mod:`nest_experiments.results`) and the per-run readers the report uses (steady window, AQM egresses, DASH
  metrics, queue delays).
- :mod:`.utilization`: per-egress link utilisation, backlog, drops; the summary printed after a sweep.
- :mod:`.stats`: estimates with confidence intervals, the Mann-Whitney U test, p-value text.
- :mod:`.markdown`: Markdown tables.
- :mod:`.report`, :mod:`.report_checks`, :mod:`.report_figures`, :mod:`.report_md`: the shared sweep report.
- :mod:`.plot`: per-run PNGs and ``plot`` on a folder.
- :mod:`.qdelay`: captured packets matched into per-packet queue delay.
- :mod:`.wire_bytes`: bytes on the wire per protocol from a pcap.
- :mod:`.tracecheck`: delivered vs trace per window (trace fidelity).
"""
