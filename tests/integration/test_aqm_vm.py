"""Kernel AQMs through the whole runner (needs pie/fq_pie/netem: run pytest with --nest-runtime vm here).

The setting of DESIGN §2b's reference figures (HTB 10 Mbit/s, 20 ms netem on
the return path, 5 CUBIC iperf3 flows, 20 s, target 5 ms), with the queue
delay captured as for FQ-PIE. The tests hold what does not depend on how much
CPU the TCG guest gets: PIE's delay within 0.5x-2x of its target, drops, the
traffic going through the AQM leaf, the capture method against PIE's own
figure. How close goodput and delay come to the reference figures (5.46 ms,
9.24 Mbit/s) is fidelity, measured by ``bench/pie_reference.py``: on a host
whose CPU is contended the guest's link carried 5.6-9.2 Mbit/s (CI once saw
FQ-PIE at 70% of the rate).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nest_experiments.analysis.utilization import egress_figures, iperf3_goodput_bps
from nest_experiments.collectors.capture import match_captures
from nest_experiments.config.sweep import expand
from nest_experiments.rundir import RunFolder, write_json
from nest_experiments.runs.runner import Run

pytestmark = [pytest.mark.vm]
QDELAY_FIGURES = ("matched_fraction", "unmatched_ingress", "qdisc_drops", "kernel_mean_delay_ms", "mean_pie_style_ms",
                  "mean_per_packet_ms", "p95_ms", "ratio_pie_style_to_kernel", "ratio_per_packet_to_kernel")


def _run(tmp_path: Path, kind: str) -> Path:
    raw = {
        "experiment": {"name": f"aqm_{kind}", "topology": "dumbbell", "duration": "20s", "qdelay_links": ["bottleneck"]},
        "links": {"bottleneck": {"rate": "10mbit", "forward": {"qdisc": {"kind": kind, "target": "5ms"}},
                                 "reverse": {"delay": "20ms"}}},
        "apps": {"bulk": {"kind": "iperf3", "src": "h1", "dst": "s1", "flows": 5}},
    }
    (spec,) = expand(raw)
    outcome = Run(spec, tmp_path / spec.name).execute()
    assert outcome.status == "completed", outcome.reason
    _match_after_the_run(outcome.run_dir)
    return outcome.run_dir


def _match_after_the_run(run_dir: Path) -> None:
    """In the guest, the run leaves its pcaps for the host (launch.py); this test matches them here, after the run."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert match_captures(run_dir, manifest) == []
    write_json(run_dir / "manifest.json", manifest)


def _qdelay(run_dir: Path) -> dict[str, Any]:
    (s,) = json.loads((run_dir / "qdelay_summary.json").read_text())["egresses"]
    print(f"qdelay {s['qdisc']}: " + ", ".join(f"{k}={s.get(k)}" for k in QDELAY_FIGURES))
    assert s["node"] == "r1" and s["matched_fraction"] > 0.95
    assert abs(s["unmatched_ingress"] - s["qdisc_drops"]) <= max(5, 0.02 * s["qdisc_drops"])
    return s


def _through_the_leaf(run_dir: Path, kind: str) -> float:
    """Bytes the AQM leaf sent over the run / bytes iperf3's receivers got (headers and retransmits make it > 1)."""
    q = RunFolder(run_dir).qdisc()
    leaf = q[(q.node == "r1") & (q.kind == kind)]
    s = pd.read_csv(run_dir / "iperf3_summary.csv")
    received = float((s.receiver_bits_per_second * s.seconds).sum() / 8)
    assert received > 0
    return float(leaf.sent_bytes.max() - leaf.sent_bytes.min()) / received


@pytest.fixture(scope="module")
def pie_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("pie"), "pie")


def test_pie_holds_its_target_and_drops(pie_run: Path) -> None:
    (fwd,) = [f for f in egress_figures(pie_run) if f.node == "r1"]
    assert fwd.qdisc == "pie" and fwd.mean_delay_ms is not None
    assert 0.5 * 5.0 <= fwd.mean_delay_ms <= 2 * 5.0
    assert fwd.drops > 0


def test_pie_carries_the_traffic_in_the_vm(pie_run: Path) -> None:
    (fwd,) = [f for f in egress_figures(pie_run) if f.node == "r1"]
    goodput = iperf3_goodput_bps(pie_run)
    assert 1.0 <= _through_the_leaf(pie_run, "pie") <= 1.15  # every byte received went through PIE
    assert goodput is not None and goodput > 0.5 * 10e6  # the link was busy (its share of the rate: bench/)
    assert fwd.utilization is not None and fwd.utilization >= 0.5
    manifest = json.loads((pie_run / "manifest.json").read_text())
    assert manifest["runtime"] == "vm" and manifest["vm"]["accel"] in ("tcg", "kvm")
    assert manifest["vm"]["host_awake"] in ("0", "1")


def test_fq_pie_installs_carries_traffic_and_drops(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "fq_pie")
    assert _qdelay(run_dir)["mean_per_packet_ms"] > 0  # the delay FQ-PIE does not report, measured
    (fwd,) = [f for f in egress_figures(run_dir) if f.node == "r1"]
    assert fwd.qdisc == "fq_pie"
    assert 1.0 <= _through_the_leaf(run_dir, "fq_pie") <= 1.15  # every byte received went through FQ-PIE
    assert fwd.utilization is not None and fwd.utilization >= 0.5  # the link was busy (its share: bench/)
    assert fwd.drops > 0


def test_capture_delay_agrees_with_pie_own_delay(pie_run: Path) -> None:
    """The FQ-PIE method (captures, matched after the run) on a PIE link vs PIE's own mean delay."""
    s = _qdelay(pie_run)
    assert s["kernel_mean_delay_ms"] is not None and s["pie_style_samples"] > 100
    assert s["mean_pie_style_ms"] == pytest.approx(s["kernel_mean_delay_ms"], rel=0.2)  # PIE's way vs PIE
    # per packet, the empty-queue moments PIE counts as 0 do not exist: within 20% on a busy link
    # (DESIGN §2b), up to 1.5x when a CPU-starved guest let the queue run dry (seen: 1.48x)
    assert 0.9 <= s["mean_per_packet_ms"] / s["kernel_mean_delay_ms"] <= 1.6
    rows = (pie_run / "qdelay.csv").read_text().splitlines()
    assert rows[0] == "t,node,dev,delay_ms,method" and len(rows) > 10_000
    assert not (pie_run / "captures").exists()  # deleted once matched
