"""MPTCP limits and endpoints as a plan (:mod:`nest_experiments.net.mptcp`), compared with captured ``ip`` output."""

from __future__ import annotations

from nest_experiments.config import topology as topo
from nest_experiments.net import mptcp

# ``ip mptcp limits show`` and ``ip -j mptcp endpoint show`` (iproute2 6.1) after the plan below was applied
LIMITS = "add_addr_accepted 2 subflows 2 \n"


def _plan(flags: tuple[str, ...] = ("subflow", "fullmesh")) -> mptcp.MptcpPlan:
    return mptcp.plan_node(topo.load("t", "multihomed_dumbbell"), "h2", ns="nx-h2", subflows=2, flags=flags)


def _shown(plan: mptcp.MptcpPlan) -> str:
    return "[" + ",".join(f'{{"address":"{e.address}","id":{i + 1},' + "".join(f'"{f}":true,' for f in e.flags)
                          + f'"dev":"{e.dev}"}}' for i, e in enumerate(plan.endpoints)) + "]"


def test_the_plan_is_limits_then_one_endpoint_per_extra_address() -> None:
    plan = _plan()
    commands = plan.commands()
    assert commands[0] == ["ip", "-n", "nx-h2", "mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "2"]
    assert len(plan.endpoints) == len(topo.load("t", "multihomed_dumbbell").links_of("h2")) - 1 >= 1
    e = plan.endpoints[0]
    assert commands[1] == ["ip", "-n", "nx-h2", "mptcp", "endpoint", "add", e.address, "dev", e.dev, "subflow", "fullmesh"]


def test_read_back_equal_to_the_plan_has_no_difference() -> None:
    plan = _plan()
    assert mptcp.parse_limits(LIMITS) == {"add_addr_accepted": 2, "subflows": 2}
    assert mptcp.compare(plan, mptcp.parse_limits(LIMITS), mptcp.parse_endpoints(_shown(plan))) == []


def test_a_missing_endpoint_a_wrong_flag_and_a_wrong_limit_are_named() -> None:
    plan = _plan()
    signal = _plan(("signal",))
    problems = mptcp.compare(plan, {"subflows": 2, "add_addr_accepted": 0}, mptcp.parse_endpoints(_shown(signal)))
    assert any("add_addr_accepted is 0, planned 2" in p for p in problems)
    assert any("fullmesh subflow planned, not in the kernel" in p for p in problems)
    assert any("signal in the kernel, not planned" in p for p in problems)
    assert mptcp.compare(plan, mptcp.parse_limits(LIMITS), []) != []
