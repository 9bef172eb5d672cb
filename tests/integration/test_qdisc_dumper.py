"""The qdisc sampler's own netlink dump and decoder against pyroute2's ``IPRoute.get_qdiscs``, in a real namespace.

A namespace with a veth pair, HTB and an explicit pfifo leaf, traffic sent
through it: both readings must give the same rows (kinds, handles, parents,
counters) for the shaped device, nothing from the other devices, and the
counters must show the packets ``ping`` sent.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from nest_experiments.net.procs import in_netns
from nest_experiments.net.rtnl import QdiscDumper
from nest_experiments.parsers.tcstats import qdisc_row

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def shaped_ns() -> Iterator[str]:
    ns = f"nx{secrets.token_hex(3)}-dump"
    ip("netns", "add", ns)
    try:
        ip("-n", ns, "link", "add", "a0", "type", "veth", "peer", "name", "b0")
        ip("-n", ns, "addr", "add", "10.77.0.1/24", "dev", "a0")
        for dev in ("lo", "a0", "b0"):
            ip("-n", ns, "link", "set", dev, "up")
        for cmd in (["qdisc", "add", "dev", "a0", "root", "handle", "1:", "htb", "default", "10"],
                    ["class", "add", "dev", "a0", "parent", "1:", "classid", "1:10", "htb", "rate", "10mbit"],
                    ["qdisc", "add", "dev", "a0", "parent", "1:10", "handle", "10:", "pfifo", "limit", "50"]):
            subprocess.run(["ip", "netns", "exec", ns, "tc", *cmd], check=True, capture_output=True)
        # an address on the peer's far side does not exist: the pings leave through a0 and its qdiscs all the same
        ip("-n", ns, "neigh", "add", "10.77.0.2", "lladdr", "02:00:00:00:00:02", "dev", "a0")
        subprocess.run(["ip", "netns", "exec", ns, "ping", "-c", "5", "-i", "0.01", "-W", "0.1", "10.77.0.2"],
                       capture_output=True, check=False)
        yield ns
    finally:
        ip("netns", "del", ns)


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["handle"])


def test_dump_matches_pyroute2_and_counts_the_packets(shaped_ns: str) -> None:
    from pyroute2 import IPRoute

    dumper = QdiscDumper(shaped_ns)
    try:
        index = dumper.index("a0")
        assert index is not None and dumper.index("nosuchdev") is None
        ours = _sorted([{**qdisc_row(m.kind, m.stats, m.xstats), "handle": m.handle, "parent": m.parent}
                        for m in dumper.dump(index)])
        with in_netns(shaped_ns):
            ipr = IPRoute()
        try:
            theirs = _sorted([{**qdisc_row(m.get_attr("TCA_KIND"), m.get_attr("TCA_STATS") or {},
                                           m.get_attr("TCA_XSTATS")), "handle": m["handle"], "parent": m["parent"]}
                              for m in ipr.get_qdiscs(index=index)])
        finally:
            ipr.close()
    finally:
        dumper.close()
    assert ours == theirs
    assert [r["kind"] for r in ours] == ["htb", "pfifo"]
    leaf = ours[1]
    assert leaf["sent_pkts"] >= 5  # the pings (and ARP-free: the neighbour is static)
