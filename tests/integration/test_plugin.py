"""The pytest plugin's fixtures on the host kernel (HTB, veth, MPTCP: no VM needed)."""

from __future__ import annotations

import json
import subprocess

import pytest

from nest_experiments.errors import NetworkSetupError

pytestmark = pytest.mark.integration


def test_bottleneck_limits_a_flow(no_leftovers, nest_network) -> None:  # type: ignore[no-untyped-def]
    net = nest_network("dumbbell", links={"bottleneck": {"rate": "5mbit"}})
    server = net.popen("s1", ["iperf3", "-s", "-1"])
    net.run("s1", ["sh", "-c", "for i in $(seq 50); do ss -Hltn | grep -q 5201 && exit 0; sleep 0.1; done; exit 1"])
    out = net.run("h1", ["iperf3", "-c", net.addr("s1"), "-t", "3", "-J"], timeout=30).stdout
    server.wait(timeout=10)
    goodput = json.loads(out)["end"]["sum_received"]["bits_per_second"]
    assert 0.85 * 5e6 <= goodput <= 5e6


def test_every_node_reaches_every_other(no_leftovers, nest_network) -> None:  # type: ignore[no-untyped-def]
    net = nest_network("multihomed_dumbbell")
    for src, dst in [("h1", "s1"), ("h3", "s3"), ("h2", "s2"), ("s1", "h1")]:
        net.run(src, ["ping", "-c", "1", "-W", "2", net.addr(dst)])
    assert net.run("r1", ["sysctl", "-n", "net.ipv4.ip_forward"]).stdout.strip() == "1"
    assert net.run("h1", ["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).stdout.strip() == "cubic"


def test_read_back_catches_a_qdisc_changed_behind_our_back(no_leftovers, nest_network) -> None:  # type: ignore[no-untyped-def]
    net = nest_network("chain", links={"bottleneck": {"rate": "10mbit", "qdisc": {"kind": "pfifo", "limit": 50}}})
    egress = net.egress("bottleneck", "r")
    net.net.read_back(egress.plan)  # as installed: fine
    tc = ["tc", "-n", net.ns("r"), "qdisc"]
    subprocess.run([*tc, "del", "dev", egress.dev, "parent", "1:1", "handle", "10:"], check=True)
    subprocess.run([*tc, "add", "dev", egress.dev, "parent", "1:1", "handle", "10:", "bfifo", "limit", "3000"], check=True)
    with pytest.raises(NetworkSetupError, match="expected qdisc pfifo, kernel has bfifo"):
        net.net.read_back(egress.plan)
    # the HTB class's rate (read over netlink, in-process): tc changes it, the read-back sees tc's number
    subprocess.run(["tc", "-n", net.ns("r"), "class", "change", "dev", egress.dev, "parent", "1:", "classid", "1:1",
                    "htb", "rate", "9mbit", "ceil", "9mbit"], check=True)
    with pytest.raises(NetworkSetupError, match="class 1:1: rate 9000000 bit/s, expected 10000000"):
        net.net.read_back(egress.plan)


def test_offloads_are_off_around_shaped_links(no_leftovers, nest_network) -> None:  # type: ignore[no-untyped-def]
    # the shaping router's neighbour too: its GSO super-packets would reach the shaped queue whole
    net = nest_network("chain", links={"bottleneck": {"rate": "10mbit"}})
    for node, dev in (("r", "s"), ("s", "r"), ("c", "r"), ("r", "c")):
        features = net.run(node, ["ethtool", "-k", dev]).stdout
        assert "tcp-segmentation-offload: off" in features and "generic-segmentation-offload: off" in features, (node, dev)


def test_a_link_with_offloads_true_keeps_them(no_leftovers, nest_network) -> None:  # type: ignore[no-untyped-def]
    net = nest_network("chain", links={"bottleneck": {"rate": "10mbit"}, "access": {"offloads": True}})
    assert "generic-segmentation-offload: on" in net.run("c", ["ethtool", "-k", "r"]).stdout
    assert "generic-segmentation-offload: off" in net.run("r", ["ethtool", "-k", "s"]).stdout


AQM_FLAGS = {
    "pie": {"ecn": True, "bytemode": True, "dq_rate_estimator": True},
    "fq_pie": {"ecn": True, "bytemode": True},
    "codel": {"ecn": True},
    "fq_codel": {"ecn": True},
}


@pytest.mark.vm
@pytest.mark.parametrize("kind", sorted(AQM_FLAGS))
def test_aqm_flags_read_back_in_the_vm(no_leftovers, nest_network, kind: str) -> None:  # type: ignore[no-untyped-def]
    """Every flag we set reads back from the real kernel + iproute2, and ecn turned off behind our back is caught."""
    qdisc = {"kind": kind, "target": "5ms", **AQM_FLAGS[kind]}
    net = nest_network("chain", links={"bottleneck": {"rate": "10mbit", "qdisc": qdisc}})
    egress = net.egress("bottleneck", "r")
    assert dict(egress.plan.qdiscs[-1].options).items() >= AQM_FLAGS[kind].items()
    net.net.read_back(egress.plan)  # as installed: every flag reads back on
    tc = ["tc", "-n", net.ns("r"), "qdisc", "change", "dev", egress.dev, "parent", "1:1", "handle", "10:"]
    subprocess.run([*tc, kind, "noecn"], check=True)
    with pytest.raises(NetworkSetupError, match=f"{kind} ecn is off, expected on"):
        net.net.read_back(egress.plan)
