"""Trace-driven links in real namespaces (host kernel: HTB is all they need).

The rate changes go over netlink (:class:`~nest_experiments.net.rtnl.HtbRates`),
one thread applies a schedule (:class:`~nest_experiments.runs.traceplay.TracePlayer`),
and ``tc`` itself, a separate program, reads the classes back. Then a whole
run: three CUBIC flows through a bottleneck whose forward direction steps
2 -> 1 -> 3 Mbit/s must deliver what each step allows.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nest_experiments.analysis.tracecheck import trace_fidelity
from nest_experiments.config import parse_experiment
from nest_experiments.config.sweep import expand
from nest_experiments.errors import NetworkSetupError
from nest_experiments.net.rtnl import HtbRates
from nest_experiments.net.tcplan import parse_htb_classes
from nest_experiments.rundir import read_csv
from nest_experiments.runs.runner import Run
from nest_experiments.runs.traceplay import TracePlayer, changes_for

if TYPE_CHECKING:  # a module-level import would make pytest try to collect it
    from nest_experiments.pytest_plugin import TestNetwork

pytestmark = pytest.mark.integration
STEPS = [["0s", "2mbit"], ["3s", "1mbit"], ["6s", "3mbit"]]


def tc_class(net: TestNetwork, node: str) -> dict[str, str]:
    """rate, ceil, burst, cburst, quantum of the bottleneck's HTB class at ``node``, as ``tc -d`` prints them."""
    egress = net.egress("bottleneck", node)
    text = net.run(node, ["tc", "-d", "class", "show", "dev", egress.dev, "classid", egress.plan.htb_class]).stdout
    return dict(re.findall(r"\b(rate|ceil|burst|cburst|quantum) (\S+)", text))


def test_netlink_change_sets_the_class_as_tc_would_and_reads_back(no_leftovers: None, nest_network: Any) -> None:
    net = nest_network("dumbbell", links={"bottleneck": {"trace": STEPS}})
    fwd, rev = net.egress("bottleneck", "r1"), net.egress("bottleneck", "r2")
    assert tc_class(net, "r1")["rate"] == "2Mbit"  # built at the trace's first rate
    rates = HtbRates([fwd, rev])
    try:
        for bps in (64_000, 1_152_000, 7_340_000):  # rates that tc prints exactly
            rates.set(fwd, bps)
            net.run("r2", ["tc", "class", "change", "dev", rev.dev, "parent", "1:", "classid", "1:1", "htb",
                           "rate", f"{bps}bit", "ceil", f"{bps}bit"])
            assert rates.read(fwd).rate_bps == rates.read(fwd).ceil_bps == bps
            text = net.run("r1", ["tc", "class", "show", "dev", fwd.dev]).stdout
            assert parse_htb_classes(text)["1:1"] == bps  # a separate program sees it
            ours, tcs = tc_class(net, "r1"), tc_class(net, "r2")
            assert ours == tcs, (bps, ours, tcs)  # the same burst and quantum as tc's own change
        with pytest.raises(NetworkSetupError, match="refused: No such file"):
            rates.set(replace(fwd, plan=replace(fwd.plan, htb_class="1:7")), 1_000_000)  # no such class
    finally:
        rates.close()
    assert "qdisc pfifo 10:" in net.run("r1", ["tc", "qdisc", "show", "dev", fwd.dev]).stdout  # the leaf stays


def test_player_applies_a_schedule_on_time_and_records_it(no_leftovers: None, nest_network: Any, tmp_path: Path) -> None:
    schedule = [["0s", "2mbit"], ["0.5s", "1mbit"], ["1s", "3mbit"], ["1.5s", "500kbit"], ["2s", "loop"]]
    net = nest_network("dumbbell", links={"bottleneck": {"forward": {"trace": schedule}}})
    exp = parse_experiment({"experiment": {"name": "t", "duration": "3s"},
                            "links": {"bottleneck": {"forward": {"trace": schedule}}}})
    t0 = time.monotonic()
    player = TracePlayer(changes_for(exp, net.net.egresses, 3.0), tmp_path / "rates.csv", clock=lambda: time.monotonic() - t0)
    player.open()
    player.start()
    seen = []
    for at in (0.25, 0.75, 1.25, 1.75, 2.25, 2.75):  # in the middle of each step
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        seen.append(parse_htb_classes(net.run("r1", ["tc", "class", "show", "dev", net.egress("bottleneck", "r1").dev]).stdout)["1:1"])
    player.stop()
    assert seen == [2_000_000, 1_000_000, 3_000_000, 500_000, 2_000_000, 1_000_000]
    rows = read_csv(tmp_path / "rates.csv")
    assert [(float(r["t_scheduled"]), int(r["rate_bps"])) for r in rows] == [
        (0.0, 2_000_000), (0.5, 1_000_000), (1.0, 3_000_000), (1.5, 500_000), (2.0, 2_000_000), (2.5, 1_000_000)]
    assert {(r["link"], r["direction"], r["node"]) for r in rows} == {("bottleneck", "forward", "r1")}
    late = [float(r["t"]) - float(r["t_scheduled"]) for r in rows[1:]]
    print(f"\nlate by {[round(x * 1000, 1) for x in late]} ms")
    assert all(0 <= x < 0.05 for x in late)  # host: a thread wakes within a few ms
    assert player.summary()["changes_applied"] == 5 and player.warnings() == []


def test_a_saturating_flow_follows_a_stepped_trace(no_leftovers: None, tmp_path: Path) -> None:
    raw = {
        "experiment": {"name": "trace_steps", "topology": "dumbbell", "duration": "10s", "sample_interval": "100ms"},
        "links": {"bottleneck": {"forward": {"trace": STEPS, "qdisc": {"kind": "pfifo", "limit": 100}}}},
        "apps": {"bulk": {"kind": "iperf3", "src": "h1", "dst": "s1", "flows": 3}},
    }
    (spec,) = expand(raw)
    outcome = Run(spec, tmp_path / spec.name).execute()
    assert outcome.status == "completed", outcome.reason
    (fid,) = trace_fidelity(outcome.run_dir, start_s=2.0, end_s=9.0)  # from 2 s: the flows have filled the queue
    for w in fid.windows:
        print(f"t={w.t:4.1f} trace {w.trace_bps / 1e6:5.3f} Mbit/s delivered {w.delivered_bps / 1e6:5.3f} "
              f"ratio {w.ratio:.3f} busy={w.busy}")
    print(f"mean ratio {fid.mean_ratio:.4f}, correlation {fid.correlation:.4f}, drops leaf {fid.leaf_drops} "
          f"htb {fid.htb_drops}")
    assert (fid.link, fid.direction, fid.node) == ("bottleneck", "forward", "r1")
    assert len(fid.windows) == 7 and len(fid.busy) >= 5  # three flows keep the queue busy but for a refill
    # The bench's bounds (2 % over the run, 5 % per busy 1 s window). Until the senders' offloads went off too
    # (net.network.no_offloads) this test allowed 4 % / 20 %: HTB got the senders' GSO super-packets and released
    # each as one burst (1 s windows of 1.138 then 0.856 at the 1 -> 3 Mbit/s step); now 0.993-1.005.
    assert fid.ok, [(round(w.t, 1), round(w.ratio, 3)) for w in fid.windows]
    assert fid.correlation > 0.95 and fid.drops_outside_leaf == 0
    assert_no_super_packets(outcome.run_dir)
    rates = read_csv(outcome.run_dir / "rates.csv")
    assert [int(r["rate_bps"]) for r in rates] == [2_000_000, 1_000_000, 3_000_000]
    assert max(float(r["t"]) - float(r["t_scheduled"]) for r in rates) < 0.05
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    assert manifest["trace"]["changes_applied"] == 2
    assert not [t for t in threading.enumerate() if t.name == "trace-player"]  # the player's thread ended


def assert_no_super_packets(run_dir: Path, mtu_frame: int = 1514) -> None:
    """No sample of a shaped leaf holds more bytes than its packets can as frames of the MTU: the packets reach
    the queue segmented (a GSO skb of n segments counts once in ``backlog_pkts``)."""
    leaves = [r for r in read_csv(run_dir / "qdisc.csv") if r["parent"] != "root" and int(r["backlog_pkts"]) > 0]
    assert leaves  # the flows built a queue
    fat = [r for r in leaves if int(r["backlog_bytes"]) > int(r["backlog_pkts"]) * mtu_frame]
    assert not fat, [(r["t"], r["node"], r["backlog_bytes"], r["backlog_pkts"]) for r in fat[:5]]
