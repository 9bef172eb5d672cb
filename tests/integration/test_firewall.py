"""Firewalls on the host kernel: nftables rules and tc shapers on a router, real UDP datagrams through it."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import ROOT, cli, our_namespaces

if TYPE_CHECKING:  # a module-level import would make pytest try to collect it
    from nest_experiments.pytest_plugin import TestNetwork

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

SEND_S = 4.0
SEND_BPS = 1_000_000
DATAGRAM = 1000
# the receiver: every datagram's arrival time and size, as JSON on stdout when the sender stops sending
RECEIVER = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(float(sys.argv[3]))
print("ready", flush=True)
got = []
try:
    while True:
        got.append((time.monotonic(), len(s.recv(65536))))
except socket.timeout:
    pass
print(json.dumps(got), flush=True)
"""
SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dest, size, rate, length = (sys.argv[1], int(sys.argv[2])), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
t0 = time.monotonic()
n = 0
while time.monotonic() - t0 < length:
    s.sendto(b"x" * size, dest)
    n += 1
    time.sleep(max(0.0, t0 + n * size * 8 / rate - time.monotonic()))
print(n * size, time.monotonic(), flush=True)
"""


def udp_flow(net: TestNetwork, port: int, *, idle_s: float = 3.0) -> tuple[list[tuple[float, int]], int, float]:
    """SEND_BPS of UDP payload from h1 to s1:port for SEND_S; (arrivals (t, bytes), bytes sent, send start)."""
    rx = net.popen("s1", [sys.executable, "-c", RECEIVER, net.addr("s1"), str(port), str(idle_s)])
    assert rx.stdout is not None and rx.stdout.readline().strip() == b"ready"
    start = time.monotonic()
    sent = net.run("h1", [sys.executable, "-c", SENDER, net.addr("s1"), str(port), str(DATAGRAM), str(SEND_BPS),
                          str(SEND_S)], timeout=30)
    out, _ = rx.communicate(timeout=30)
    return [tuple(x) for x in json.loads(out.decode().splitlines()[-1])], int(sent.stdout.split()[0]), start


def received_bps(arrivals: list[tuple[float, int]], start: float, skip_s: float) -> float:
    """Payload bit rate from ``skip_s`` after the start to the end of sending (the policer's bucket is full at first)."""
    window = [size for t, size in arrivals if start + skip_s <= t <= start + SEND_S]
    return 8 * sum(window) / (SEND_S - skip_s)


def counters(net: TestNetwork) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["firewall"], r["direction"]): r for r in net.net.firewall_counters()}


def test_a_udp_flow_through_the_router_gets_the_limit_and_other_ports_do_not(
        nest_network: Callable[..., TestNetwork]) -> None:
    net = nest_network("dumbbell", firewalls={"udp443": {"router": "r1", "port": 443, "rate": "64kbit"}})
    arrivals, sent, start = udp_flow(net, 443)
    got = received_bps(arrivals, start, skip_s=1.5)
    # the limit counts IP packets (28 bytes of headers per 1000-byte payload): the payload gets ~62 kbit/s
    print(f"udp443 limited to 64 kbit/s: payload received {got / 1000:.1f} kbit/s")
    assert 64_000 * 0.8 <= got <= 64_000 * 1.1, got
    c = counters(net)[("udp443", "to_port")]
    assert c["matched_pkts"] == sent // DATAGRAM  # every datagram crossed the rule ...
    assert c["matched_pkts"] - c["dropped_pkts"] == len(arrivals)  # ... and what it did not drop arrived
    free, sent_free, start_free = udp_flow(net, 444)
    assert sum(size for _, size in free) == sent_free  # another port: untouched
    assert received_bps(free, start_free, skip_s=0.5) > 0.8 * SEND_BPS


def test_drop_blocks_udp_only(nest_network: Callable[..., TestNetwork]) -> None:
    net = nest_network("dumbbell", firewalls={"udp443": {"router": "r2", "port": 443, "action": "drop"}})
    arrivals, sent, _ = udp_flow(net, 443, idle_s=1.5)
    assert sent > 0 and arrivals == []
    assert counters(net)[("udp443", "to_port")]["dropped_pkts"] == sent // DATAGRAM
    server = net.popen("s1", [sys.executable, "-c", "import socket,sys; s=socket.create_server((sys.argv[1], 443)); "
                              "c,_=s.accept(); c.sendall(b'tcp ok')", net.addr("s1")])
    time.sleep(0.5)
    tcp = net.run("h1", [sys.executable, "-c", "import socket,sys; print(socket.create_connection((sys.argv[1], 443),"
                         " timeout=5).recv(10).decode())", net.addr("s1")])
    assert tcp.stdout.strip() == "tcp ok"  # TCP to the same port passes
    server.wait(timeout=5)


SHAPE_BPS = 200_000
SHAPE_QUEUE = 50
IP_PACKET = DATAGRAM + 28  # what HTB and the counters count (IP bytes)


def _ifbs(ns: str) -> list[str]:
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "type", "ifb"], capture_output=True, text=True,
                         check=False).stdout
    return sorted(link["ifname"] for link in json.loads(out or "[]"))


def test_a_shaped_udp_flow_queues_at_the_rate_and_is_counted_once(nest_network: Callable[..., TestNetwork]) -> None:
    from nest_experiments.net import nftplan

    net = nest_network("dumbbell", firewalls={"udp443": {"router": "r1", "port": 443, "action": "shape",
                                                         "rate": "200kbit", "queue": SHAPE_QUEUE}})
    assert _ifbs(net.ns("r1")) == ["fw0f", "fw0t"]  # applied and read back (a difference stops the build)
    arrivals, sent, start = udp_flow(net, 443)
    got = received_bps(arrivals, start, skip_s=1.0) * IP_PACKET / DATAGRAM
    drained_s = arrivals[-1][0] - (start + SEND_S)
    print(f"udp443 shaped to 200 kbit/s: {got / 1000:.1f} kbit/s of IP packets, {len(arrivals)} of "
          f"{sent // DATAGRAM} datagrams arrived, the last {drained_s:.2f} s after the sender stopped")
    assert SHAPE_BPS * 0.85 <= got <= SHAPE_BPS * 1.05, got
    # a shaper, not a policer: the full queue drains at the rate after the sender stops (50 x 1028 B: 2.06 s)
    full_queue_s = SHAPE_QUEUE * IP_PACKET * 8 / SHAPE_BPS
    assert 0.8 * full_queue_s <= drained_s <= 1.2 * full_queue_s, drained_s
    row = counters(net)[("udp443", "to_port")]
    assert (row["action"], row["matched_pkts"], row["matched_bytes"]) == ("shape", sent // DATAGRAM, sent // DATAGRAM * IP_PACKET)
    assert row["dropped_pkts"] == sent // DATAGRAM - len(arrivals) > 0  # the queue drained: what is not dropped arrived
    # the nft rule after the shaper counts each packet that left it once (the ifb returns packets past tc ingress)
    [plan] = net.net.firewall_plans
    nft = {(r["firewall"], r["direction"]): r for r in nftplan.counter_rows(plan, net.net.nft_listing(plan.ns))}
    assert nft[("udp443", "to_port")]["matched_pkts"] == len(arrivals)
    assert counters(net)[("udp443", "from_port")]["matched_pkts"] == 0


def _nft_tables(ns: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "tables"], capture_output=True, text=True,
                          check=False).stdout


FIFO = str(ROOT / "experiments" / "dumbbell_fifo.toml")
RUN = "qdisc-pfifo-100_r1"
FIREWALL = ["--set", "firewalls.udp443.router=r1", "--set", "firewalls.udp443.port=443",
            "--set", 'firewalls.udp443.rate="64kbit"']


def test_a_run_records_the_counters_and_leaves_no_table(no_leftovers: None, tmp_path: Path) -> None:
    proc = cli("run", FIFO, "--set", "experiment.duration=4s", "--only", RUN, "--no-plot", "--results", str(tmp_path),
               *FIREWALL)
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "dumbbell_fifo" / RUN
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"
    with (run_dir / "firewall.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["firewall"], r["direction"], r["rate_bps"]) for r in rows] == [("udp443", "to_port", "64000"),
                                                                             ("udp443", "from_port", "64000")]
    assert "nest_experiments" not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout


def test_a_shaped_run_records_the_shapers_counters_and_leaves_no_ifb(no_leftovers: None, tmp_path: Path) -> None:
    proc = cli("run", FIFO, "--set", "experiment.duration=3s", "--only", RUN, "--no-plot", "--results", str(tmp_path),
               *FIREWALL, "--set", 'firewalls.udp443.action="shape"')
    assert proc.returncode == 0, proc.stderr
    with (tmp_path / "dumbbell_fifo" / RUN / "firewall.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["direction"], r["action"], r["dropped_bytes"]) for r in rows] == [("to_port", "shape", ""),
                                                                                 ("from_port", "shape", "")]
    root_ifbs = subprocess.run(["ip", "-j", "link", "show", "type", "ifb"], capture_output=True, text=True).stdout
    assert not [link["ifname"] for link in json.loads(root_ifbs or "[]") if link["ifname"].startswith("fw")]


def test_the_next_run_removes_the_table_of_a_killed_run(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "nest_experiments", "run", FIFO, "--set", "experiment.duration=30s",
                             "--only", RUN, "--no-plot", "--results", str(tmp_path), *FIREWALL],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            routers = [ns for ns in our_namespaces() if ns.endswith("-r1")]
            if routers and "nest_experiments" in _nft_tables(routers[0]):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the firewall never appeared")
        state = json.loads(Path("/run/nest_experiments", routers[0].split("-")[0] + ".json").read_text())
        assert state["nft_tables"] == [[routers[0], "inet", "nest_experiments"]]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert "nest_experiments" in _nft_tables(routers[0])  # left behind by the kill ...
        assert cli("clean").returncode == 0  # ... until the next run (or clean) removes it
        assert routers[0] not in our_namespaces() and _nft_tables(routers[0]) == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        cli("clean")
