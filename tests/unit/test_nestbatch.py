"""net.nestbatch: NeST's commands classified and run in batches, in an order that keeps their meaning."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from nest_experiments.errors import NetworkSetupError
from nest_experiments.net.nestbatch import IP, ROOT, SYSCTL, Batcher, Step, classify, with_keywords

# what NeST 0.4.4 runs for Node("a"), Router("r") and connect(a, r) + set_address (captured on this machine)
NEST_COMMANDS = [
    "ip netns add x-a",
    "ip netns exec x-a ip link set dev lo up",
    "ip netns add x-r",
    "ip netns exec x-r ip link set dev lo up",
    "ip netns exec x-r sysctl -w net.ipv6.conf.all.forwarding=1",
    "ip netns exec x-r sysctl -w net.ipv4.ip_forward=1",
    "ip link add r type veth peer name a",
    "ip link set r netns x-a",
    "ip link set a netns x-r",
    "ip netns exec x-a ip link set dev r up",
    "ip netns exec x-r ip link set dev a up",
    "ip netns exec x-a sysctl -w net.ipv6.conf.r.accept_dad=0",
    "ip netns exec x-r sysctl -w net.ipv6.conf.a.accept_dad=0",
    "ip netns exec x-a ip address add 10.0.0.1/24 dev r",
    "ip netns exec x-r ip address add 10.0.0.2/24 dev a",
]


def test_classify_knows_nests_three_forms_and_nothing_else() -> None:
    assert classify("ip netns add x-a") == Step(ROOT, None, ("netns", "add", "x-a"))
    assert classify("ip link add r type veth peer name a") == Step(ROOT, None, ("link", "add", "name", "r", "type",
                                                                             "veth", "peer", "name", "a"))
    assert classify("ip link set r netns x-a") == Step(ROOT, None, ("link", "set", "dev", "r", "netns", "x-a"))
    assert classify("ip netns exec x-a ip address add 10.0.0.1/24 dev r") == Step(
        IP, "x-a", ("address", "add", "10.0.0.1/24", "dev", "r"))
    assert classify("ip netns exec x-r sysctl -w net.ipv4.ip_forward=1") == Step(SYSCTL, "x-r",
                                                                                 ("net.ipv4.ip_forward=1",))
    for other in ("ip -V", "tc qdisc add dev a root pie", "ip link set dev a up",  # root-namespace link state
                  "ip netns exec x-a ip -j addr show", "ip netns exec x-a ping -c1 10.0.0.2",
                  "ip netns exec x-a sysctl net.ipv4.ip_forward", "ip netns del x-a", "ip route add default via x"):
        assert classify(other) is None, other


def test_a_device_named_like_an_iproute2_keyword_gets_its_keyword() -> None:
    # iproute2 reads "a" as "address" and "b" as "broadcast" where a device may stand without "dev" / "name"
    assert classify("ip link add a type veth peer name b") == Step(ROOT, None, ("link", "add", "name", "a", "type",
                                                                             "veth", "peer", "name", "b"))
    assert classify("ip link set b netns x-a") == Step(ROOT, None, ("link", "set", "dev", "b", "netns", "x-a"))
    assert classify("ip netns exec x-s ip link set a master br") == Step(IP, "x-s", ("link", "set", "dev", "a",
                                                                                     "master", "br"))
    assert classify("ip netns exec x-a ip link set dev b up").args == ("link", "set", "dev", "b", "up")  # as it was
    assert with_keywords(["link", "set", "group", "1", "up"]) == ["link", "set", "group", "1", "up"]
    assert with_keywords(["address", "add", "10.0.0.1/24", "dev", "a"]) == ["address", "add", "10.0.0.1/24",
                                                                             "dev", "a"]


class Recorder:
    def __init__(self, fail_at: str | None = None) -> None:
        self.calls: list[tuple[str, object]] = []
        self.fail_at = fail_at
        self.sysctls: dict[tuple[str, str], str] = {}

    def run_batch(self, prefix: list[str], commands: list[list[str]]) -> None:
        self.calls.append((" ".join(prefix), [" ".join(c) for c in commands]))
        if self.fail_at and any(self.fail_at in " ".join(c) for c in commands):
            raise NetworkSetupError(f"failed: {self.fail_at}")

    def sysctl(self, ns: str, key: str, value: str) -> str:
        self.calls.append(("sysctl", (ns, key, value)))
        self.sysctls[(ns, key)] = value
        return "0" if key.endswith("broken") else value

    def direct(self, cmd: str, shell: bool = False, output: bool = False) -> object:
        self.calls.append(("direct", cmd))
        return "ip utility, iproute2-6.1.0" if output else 0


def batcher(rec: Recorder) -> Batcher:
    return Batcher(direct=rec.direct, run_batch=rec.run_batch, sysctl=rec.sysctl)


def test_root_commands_first_then_every_sysctl_then_one_ip_batch_per_namespace_side_by_side() -> None:
    rec = Recorder()
    handed: list[int] = []

    def together(jobs: Sequence[Callable[[], object]]) -> None:  # the namespaces' batches come in one call
        handed.append(len(jobs))
        rec.calls.append(("together", len(jobs)))
        for job in jobs:
            job()

    b = Batcher(direct=rec.direct, run_batch=rec.run_batch, sysctl=rec.sysctl, together=together)
    for cmd in NEST_COMMANDS:
        assert b.exec_subprocess(cmd) == 0  # NeST's "exit status 0"
    assert rec.calls == []  # nothing ran yet
    b.add_ip("x-a", [["route", "replace", "default", "via", "10.0.0.2"]])
    b.flush()
    assert rec.calls == [
        ("ip", ["netns add x-a", "netns add x-r", "link add name r type veth peer name a",
                "link set dev r netns x-a", "link set dev a netns x-r"]),
        ("sysctl", ("x-a", "net.ipv6.conf.r.accept_dad", "0")),  # DAD off before any address comes up
        ("sysctl", ("x-r", "net.ipv6.conf.all.forwarding", "1")),
        ("sysctl", ("x-r", "net.ipv4.ip_forward", "1")),
        ("sysctl", ("x-r", "net.ipv6.conf.a.accept_dad", "0")),
        ("together", 2),
        ("ip -n x-a", ["link set dev lo up", "link set dev r up", "address add 10.0.0.1/24 dev r",
                       "route replace default via 10.0.0.2"]),  # NeST's order, our routes after
        ("ip -n x-r", ["link set dev lo up", "link set dev a up", "address add 10.0.0.2/24 dev a"]),
    ]
    assert handed == [2]
    assert b.processes == 3 and b.recorded == len(NEST_COMMANDS)  # instead of 2 per `ip netns exec` command


def test_another_command_runs_what_is_recorded_first_and_version_queries_run_once() -> None:
    rec = Recorder()
    b = batcher(rec)
    b.exec_subprocess("ip netns add x-a")
    assert b.exec_subprocess("ip -V", output=True) == "ip utility, iproute2-6.1.0"
    assert b.exec_subprocess("ip -V", output=True) == "ip utility, iproute2-6.1.0"
    assert [c for c in rec.calls if c[0] == "direct"] == [("direct", "ip -V")]
    b.exec_subprocess("ip netns exec x-a ping -c1 10.0.0.2")  # not batched: the recorded namespace must exist
    assert rec.calls[-2:] == [("ip", ["netns add x-a"]), ("direct", "ip netns exec x-a ping -c1 10.0.0.2")]


def test_a_failed_command_or_a_sysctl_that_does_not_stick_stops_the_build() -> None:
    rec = Recorder(fail_at="address add")
    b = batcher(rec)
    for cmd in NEST_COMMANDS:
        b.exec_subprocess(cmd)
    with pytest.raises(NetworkSetupError, match="address add"):
        b.flush()
    b = batcher(Recorder())
    b.exec_subprocess("ip netns exec x-a sysctl -w net.broken=1")
    with pytest.raises(NetworkSetupError, match=r"x-a: net\.broken is '0' after setting '1'"):
        b.flush()
