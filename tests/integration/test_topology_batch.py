"""NeST's topology, its commands run in batches (net.nestbatch), is the topology NeST builds one command at a time."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from nest_experiments.config import load_default_raw
from nest_experiments.config.sweep import expand
from nest_experiments.net import ethtool, nestbatch
from nest_experiments.net.network import Network
from nest_experiments.net.procs import RunState, new_prefix, run_batch

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

SYSCTLS = ("net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding", "net.ipv4.tcp_congestion_control",
           "net.ipv4.conf.all.rp_filter")


def configuration(net: Network) -> dict[str, Any]:
    """Per node: IPv4 addresses and links, routes of every table, rules, the sysctls NeST and we set, and each
    interface's accept_dad (IPv6 link-local routes are left out: they appear when DAD ends, a matter of time)."""
    out: dict[str, Any] = {}
    for node in net.spec.nodes:
        ns = net.ns(node)

        def ip(*args: str, ns: str = ns) -> str:
            text = subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True, check=True).stdout
            # `ip -br` pads the name column to the width of "r1@if123", so the peer's ifindex (which differs
            # between the two builds) moves the columns: drop it, then compare the lines' words, not their spaces.
            text = re.sub(r"@if\d+", "", text)
            return "".join(" ".join(line.split()) + "\n" for line in text.splitlines())

        ifnames = [link.ifname(node) for link in net.spec.links_of(node)]
        keys = [*SYSCTLS, *(f"net.ipv6.conf.{i}.accept_dad" for i in ifnames)]
        sysctl = subprocess.run(["ip", "netns", "exec", ns, "sysctl", *keys], capture_output=True, text=True,
                                check=True).stdout
        out[node] = {"addr": ip("-4", "-br", "addr"), "link": re.sub(r"\S+:\S+:\S+:\S+:\S+:\S+", "MAC",
                                                                      ip("-br", "link")),
                     "routes": ip("-4", "route", "show", "table", "all"), "rules": ip("rule"), "sysctl": sysctl}
    return out


class Unbatched:
    """NeST's commands as NeST runs them (one process each); our routes in one ``ip -batch`` per node, as before."""

    @staticmethod
    def add_ip(ns: str, commands: list[list[str]]) -> None:
        run_batch(["ip", "-n", ns], commands, what="routes")


@contextlib.contextmanager
def one_command_at_a_time(**_: Any) -> Iterator[Unbatched]:
    yield Unbatched()


def test_batched_build_equals_nests_own_and_uses_a_process_per_namespace(monkeypatch: pytest.MonkeyPatch,
                                                                         no_leftovers: None) -> None:
    spec = expand(load_default_raw())[0].experiment.topology  # the NeST paper's 10-node multi-homed dumbbell
    spawned: list[str] = []
    real_popen = subprocess.Popen.__init__

    def counting(self: subprocess.Popen[Any], args: Any, *a: Any, **k: Any) -> None:
        spawned.append(args if isinstance(args, str) else " ".join(map(str, args)))
        real_popen(self, args, *a, **k)

    monkeypatch.setattr(subprocess.Popen, "__init__", counting)
    with Network(spec, state=RunState(prefix=new_prefix())) as net:
        batched_procs = len(spawned)
        batched = configuration(net)
    with monkeypatch.context() as m:
        m.setattr(nestbatch, "batched", one_command_at_a_time)
        spawned.clear()
        with Network(spec, state=RunState(prefix=new_prefix())) as net:
            own_procs = len(spawned)
            own = configuration(net)
    assert batched == own
    print(f"\nprocesses to build and read back: {batched_procs} batched, {own_procs} one NeST command at a time")
    assert batched_procs <= len(spec.nodes) + 12 < own_procs  # one ip batch per namespace, a root batch, a few more


def test_offloads_off_in_process_leaves_the_device_as_ethtool_k_does(no_leftovers: None) -> None:
    """net.ethtool's ETHTOOL_SFEATURES request against `ethtool -K ... tso off gso off gro off tx-udp-segmentation
    off` (what the adapter ran before): two fresh veths, the same features after."""
    ns = f"{new_prefix()}-eth"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for a, b in (("va", "vb"), ("wa", "wb")):
            subprocess.run(["ip", "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b], check=True)
        subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-K", "wa", "tso", "off", "gso", "off", "gro", "off",
                        "tx-udp-segmentation", "off"], check=True)
        cleared = ethtool.offloads_off(ns, "va")
        assert {"tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-generic-segmentation", "rx-gro",
                "tx-udp-segmentation"} <= set(cleared)

        def features(dev: str) -> list[str]:
            out = subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-k", dev], capture_output=True, text=True,
                                 check=True).stdout
            return out.splitlines()[1:]  # the first line names the device

        assert features("va") == features("wa")
        assert features("vb") != features("va")  # the peer keeps its offloads: the request hit one device
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_nodes_named_like_iproute2_keywords_build_and_carry_packets(no_leftovers: None) -> None:
    # "a" is iproute2's abbreviation of "address", "b" of "broadcast": NeST's `ip link set a netns ...` failed
    from nest_experiments.config import topology
    spec = topology.parse("keywords", {"nodes": {"a": "host", "m": "router", "b": "host"},
                                       "links": {"left": {"a": "a", "b": "m"}, "right": {"a": "m", "b": "b"}}})
    with Network(spec, state=RunState(prefix=new_prefix())) as net:
        links = subprocess.run(["ip", "-n", net.ns("m"), "-br", "link"], capture_output=True, text=True,
                               check=True).stdout
        assert re.search(r"^a@", links, flags=re.M) and re.search(r"^b@", links, flags=re.M), links
        addr = subprocess.run(["ip", "-n", net.ns("b"), "-4", "-br", "addr", "show", "dev", "m"],
                              capture_output=True, text=True, check=True).stdout.split()[2].split("/")[0]
        ping = subprocess.run(["ip", "netns", "exec", net.ns("a"), "ping", "-c", "2", "-i", "0.2", "-W", "2", addr],
                              capture_output=True, text=True)
        assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout + ping.stderr
