"""analysis: link utilization of fixed-rate and trace-driven egresses, from a synthetic run folder."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from nest_experiments.analysis.utilization import egress_figures

# the traced egress r1: built at 2 Mbit/s, then 1 Mbit/s from 5.02 s and 3 Mbit/s from 8.01 s (as applied)
RATES = [(0.0, 0.0, 2_000_000), (5.02, 5.0, 1_000_000), (8.01, 8.0, 3_000_000)]


def applied_bits(t: float) -> float:
    edges = [r[0] for r in RATES[1:]] + [float("inf")]
    return sum(rate * max(0.0, min(t, t1) - t0) for (t0, _, rate), t1 in zip(RATES, edges, strict=True))


def write_csv(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def run_folder(tmp_path: Path, *, share: float) -> Path:
    """Both egresses of a link, sampled every 0.5 s for 12 s: r1 traced and sending ``share`` of what the trace
    applied, r2 at a fixed 10 Mbit/s and sending 40% of it."""
    egress = {"link": "bottleneck", "dev": "eth1", "leaf_handle": "10:", "qdisc": "pfifo", "sampled": True}
    (tmp_path / "links.json").write_text(json.dumps({"egresses": [
        {**egress, "node": "r1", "rate_bps": 2_000_000, "trace": "generator dvl"},
        {**egress, "node": "r2", "rate_bps": 10_000_000, "trace": None}]}))
    (tmp_path / "manifest.json").write_text(json.dumps({"status": "completed", "traffic_start_t": 0.5,
                                                         "traffic_end_t": 12.0}))
    write_csv(tmp_path / "rates.csv", [{"t": t, "t_scheduled": ts, "link": "bottleneck", "direction": "forward",
                                        "node": "r1", "rate_bps": rate} for t, ts, rate in RATES])
    rows = []
    for k in range(25):
        t = k / 2
        for node, sent_bits in (("r1", share * applied_bits(t)), ("r2", 0.4 * 10e6 * t)):
            rows.append({"t": t, "node": node, "dev": "eth1", "link": "bottleneck", "kind": "pfifo", "handle": "10:",
                         "backlog_bytes": 3000, "backlog_pkts": 2, "drops": 0, "sent_pkts": 0,
                         "sent_bytes": round(sent_bits / 8), "delay_ms": "", "prob": ""})
    write_csv(tmp_path / "qdisc.csv", rows)
    return tmp_path


@pytest.mark.parametrize("share", [1.0, 0.8])
def test_a_traced_egress_is_measured_against_the_rates_applied(tmp_path: Path, share: float) -> None:
    figures = {f.node: f for f in egress_figures(run_folder(tmp_path, share=share))}
    traced = figures["r1"]
    # the steady window: 2.5 s (traffic start + 2) to 11 s (end - 1)
    mean = (applied_bits(11.0) - applied_bits(2.5)) / 8.5
    assert traced.traced and traced.rate_bps == round(mean)
    assert traced.utilization == pytest.approx(share, abs=1e-4)  # not 'sent / links.json's 2 Mbit/s'
    fixed = figures["r2"]
    assert not fixed.traced and fixed.rate_bps == 10_000_000
    assert fixed.utilization == pytest.approx(0.4, abs=1e-4)


def test_a_traced_egress_without_rates_csv_has_no_utilization_rather_than_a_wrong_one(tmp_path: Path) -> None:
    run = run_folder(tmp_path, share=1.0)
    (run / "rates.csv").unlink()
    traced = {f.node: f for f in egress_figures(run)}["r1"]
    assert traced.utilization is None and traced.rate_bps is None
