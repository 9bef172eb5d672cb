from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nest_experiments.config import EgressConfig, QdiscConfig, qdisc_kinds
from nest_experiments.net.tcplan import EgressPlan, compare_qdiscs, compare_rate, parse_htb_classes, plan_egress

PIE = QdiscConfig(kind="pie", params=(("target", 0.005), ("limit", 1000), ("ecn", False)))


def test_rate_and_aqm_make_htb_with_the_aqm_as_leaf() -> None:
    plan = plan_egress("ns", "r2", EgressConfig(rate_bps=10**7, qdisc=PIE))
    cmds = [" ".join(c) for c in plan.commands[1:]]
    assert cmds == [
        "tc -n ns qdisc add dev r2 root handle 1: htb default 1",
        "tc -n ns class add dev r2 parent 1: classid 1:1 htb rate 10mbit ceil 10mbit",
        "tc -n ns qdisc add dev r2 parent 1:1 handle 10: pie target 5000us limit 1000 noecn",
    ]
    assert [q.kind for q in plan.qdiscs] == ["htb", "pie"] and plan.leaf_handle == "10:"


def test_delay_goes_in_front_of_the_shaper_so_the_aqm_stays_the_only_queue() -> None:
    plan = plan_egress("ns", "d", EgressConfig(rate_bps=10**7, delay_s=0.02, qdisc=PIE))
    assert [(q.kind, q.handle, q.parent) for q in plan.qdiscs] == [
        ("netem", "1:", "root"), ("htb", "2:", "1:1"), ("pie", "10:", "2:1")]
    assert "delay 20000us" in " ".join(plan.commands[1])


def test_delay_only_is_a_netem_root() -> None:
    plan = plan_egress("ns", "d", EgressConfig(delay_s=0.01, loss_pct=1.0))
    assert [q.kind for q in plan.qdiscs] == ["netem"]
    assert plan.commands[1][-4:] == ("delay", "10000us", "loss", "1%")


SHOWN = [{"kind": "htb", "handle": "1:", "root": True, "options": {}},
         {"kind": "pie", "handle": "10:", "parent": "1:1", "options": {"limit": 1000, "target": 5000}}]


def test_read_back_accepts_what_was_planned() -> None:
    assert compare_qdiscs(plan_egress("ns", "r2", EgressConfig(rate_bps=10**7, qdisc=PIE)), SHOWN) == []


def test_read_back_reports_a_missing_or_different_qdisc() -> None:
    plan = plan_egress("ns", "r2", EgressConfig(rate_bps=10**7, qdisc=PIE))
    assert compare_qdiscs(plan, SHOWN[:1]) == ["ns/r2 10:: expected qdisc pie, kernel has nothing"]
    wrong = [SHOWN[0], {**SHOWN[1], "options": {"limit": 1000, "target": 15000}}]
    assert compare_qdiscs(plan, wrong) == ["ns/r2 10:: pie target is 15000, expected 5000"]


def test_htb_class_text_is_parsed_and_compared() -> None:
    text = "class htb 1:1 root leaf 10: prio 0 rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b \n"
    assert parse_htb_classes(text) == {"1:1": 10_000_000}
    plan = plan_egress("ns", "r2", EgressConfig(rate_bps=10**7, qdisc=PIE))
    assert compare_rate(plan, {"1:1": 10_000_000}) == []
    assert compare_rate(plan, {"1:1": 5_000_000}) != []


# ---------------------------------------------------------------- read-back of every parameter (tests/data/tc)

TC_DATA = Path(__file__).resolve().parents[1] / "data" / "tc"


def shown(name: str) -> list[dict[str, Any]]:
    return json.loads((TC_DATA / name).read_text())


def aqm_plan(kind: str, **params: Any) -> EgressPlan:
    return plan_egress("ns", "r2", EgressConfig(rate_bps=10**7, qdisc=QdiscConfig(kind=kind, params=tuple(params.items()))))


def test_every_qdisc_parameter_has_a_read_back_key() -> None:
    unread = [f"{kind}.{name}" for kind, spec in qdisc_kinds().items()
              for name, p in spec["params"].items() if not p.get("readback")]  # fmt: skip
    assert unread == []


def test_flags_set_read_back_set() -> None:
    plan = aqm_plan("pie", target=0.005, limit=1000, ecn=True, bytemode=True)
    assert ("ecn", True) in plan.qdiscs[-1].options and ("bytemode", True) in plan.qdiscs[-1].options
    assert compare_qdiscs(plan, shown("pie_ecn_bytemode.json")) == []


def test_flags_off_read_back_off() -> None:
    plan = aqm_plan("pie", target=0.005, limit=1000, ecn=False, bytemode=False)
    assert compare_qdiscs(plan, shown("pie_flags_off.json")) == []


def test_a_flag_missing_from_the_dump_is_reported_by_name() -> None:
    plan = aqm_plan("pie", target=0.005, ecn=True, bytemode=True)
    assert compare_qdiscs(plan, shown("pie_flags_off.json")) == [
        "ns/r2 10:: pie ecn is off, expected on", "ns/r2 10:: pie bytemode is off, expected on"]


def test_a_flag_set_behind_our_back_is_reported_by_name() -> None:
    plan = aqm_plan("pie", target=0.005, ecn=False, dq_rate_estimator=False)
    assert compare_qdiscs(plan, shown("pie_ecn_bytemode.json")) == ["ns/r2 10:: pie ecn is on, expected off"]


def test_a_key_tc_does_not_report_is_named_not_skipped() -> None:
    plan = aqm_plan("fq_pie", target=0.005, flows=1024, memory_limit=32 * 2**20, ecn=True)
    assert compare_qdiscs(plan, shown("fq_pie_no_memory_limit.json")) == [
        "ns/r2 10:: fq_pie memory_limit cannot be read back: `tc -j qdisc show` does not report them"
        " (iproute2 too old for this qdisc?)"]


def test_a_mismatch_names_the_key() -> None:
    plan = aqm_plan("fq_pie", target=0.005, flows=2048, ecn=True)
    assert compare_qdiscs(plan, shown("fq_pie_no_memory_limit.json")) == ["ns/r2 10:: fq_pie flows is 1024, expected 2048"]
