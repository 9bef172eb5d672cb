"""MPTCP in a namespace: the path manager's settings, planned, applied and read back like qdiscs; its counters.

A node's plan is its limits (``ip mptcp limits set``) and endpoints (``ip
mptcp endpoint add ADDR dev DEV FLAGS``) as argument lists (pure); applying
it runs them with the exit status checked, then reads back ``ip mptcp limits
show`` and ``ip -j mptcp endpoint show`` and compares: a difference stops the
run with what differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nest_experiments.config.topology import TopologySpec
from nest_experiments.errors import NetworkSetupError
from nest_experiments.net.procs import check_run, in_netns
from nest_experiments.parsers.netstat import group_counters


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    address: str
    dev: str
    flags: tuple[str, ...]  # "subflow", "fullmesh", "signal", ... as ``ip mptcp endpoint`` names them


@dataclass(frozen=True, kw_only=True)
class MptcpPlan:
    """One node's MPTCP limits and endpoints in namespace ``ns``."""

    node: str
    ns: str
    subflows: int
    add_addr_accepted: int
    endpoints: tuple[Endpoint, ...]

    def commands(self) -> list[list[str]]:
        ip = ["ip", "-n", self.ns, "mptcp"]
        limits = [*ip, "limits", "set", "subflows", str(self.subflows), "add_addr_accepted", str(self.add_addr_accepted)]
        return [limits, *([*ip, "endpoint", "add", e.address, "dev", e.dev, *e.flags] for e in self.endpoints)]


def plan_node(spec: TopologySpec, node: str, *, ns: str, subflows: int, flags: tuple[str, ...]) -> MptcpPlan:
    """Limits of ``subflows`` (subflows and accepted ADD_ADDRs), and an endpoint with ``flags`` on each of
    the node's extra addresses (its first link's address is the connection's own)."""
    endpoints = tuple(Endpoint(address=str(link.address(node, spec.base).ip), dev=link.ifname(node), flags=flags)
                      for link in spec.links_of(node)[1:])
    return MptcpPlan(node=node, ns=ns, subflows=subflows, add_addr_accepted=subflows, endpoints=endpoints)


def parse_limits(text: str) -> dict[str, int]:
    """``ip mptcp limits show`` (``add_addr_accepted 2 subflows 2``; it has no JSON form) -> name: value."""
    words = text.split()
    return {k: int(v) for k, v in zip(words[::2], words[1::2], strict=False) if v.isdigit()}


def parse_endpoints(text: str) -> list[Endpoint]:
    """``ip -j mptcp endpoint show`` -> endpoints (flags in the order ``ip`` prints them)."""
    out = []
    for e in json.loads(text or "[]"):
        flags = tuple(k for k, v in e.items() if v is True)
        out.append(Endpoint(address=str(e.get("address")), dev=str(e.get("dev", "")), flags=flags))
    return out


def compare(plan: MptcpPlan, limits: dict[str, int], endpoints: list[Endpoint]) -> list[str]:
    """Differences between the plan and the kernel's limits and endpoints."""
    where = f"{plan.node} ({plan.ns})"
    problems = [f"{where}: MPTCP limit {k} is {limits.get(k)}, planned {v}"
                for k, v in (("subflows", plan.subflows), ("add_addr_accepted", plan.add_addr_accepted))
                if limits.get(k) != v]
    got = {(e.address, e.dev, frozenset(e.flags)) for e in endpoints}
    want = {(e.address, e.dev, frozenset(e.flags)) for e in plan.endpoints}
    problems += [f"{where}: MPTCP endpoint {a} dev {d} {' '.join(sorted(f))} planned, not in the kernel"
                 for a, d, f in sorted(want - got, key=str)]
    problems += [f"{where}: MPTCP endpoint {a} dev {d} {' '.join(sorted(f))} in the kernel, not planned"
                 for a, d, f in sorted(got - want, key=str)]
    return problems


def apply(plan: MptcpPlan, *, what: str) -> None:
    """Run the plan's commands (a failing one raises), then read back and compare."""
    for argv in plan.commands():
        check_run(argv, what=f"{what}: ip mptcp on {plan.node}")
    limits = parse_limits(check_run(["ip", "-n", plan.ns, "mptcp", "limits", "show"], what=f"{what}: read-back"))
    endpoints = parse_endpoints(check_run(["ip", "-n", plan.ns, "-j", "mptcp", "endpoint", "show"],
                                          what=f"{what}: read-back"))
    problems = compare(plan, limits, endpoints)
    if problems:
        raise NetworkSetupError(f"{what}: MPTCP settings differ from the plan: " + "; ".join(problems))


def read_counters(ns: str) -> tuple[dict[str, int], int]:
    """The MPTCP MIB of namespace ``ns`` (its non-zero ``MPTcpExt`` counters) and its ``add_addr_timeout`` (s)."""
    with in_netns(ns):  # /proc/thread-self/net: this thread's namespace
        text = Path("/proc/thread-self/net/netstat").read_text()
        timeout = int(Path("/proc/sys/net/mptcp/add_addr_timeout").read_text())
    return {k: v for k, v in group_counters(text, "MPTcpExt").items() if v}, timeout
