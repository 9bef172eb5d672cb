from __future__ import annotations

from nest_experiments.config import EgressConfig, QdiscConfig
from nest_experiments.tcplan import compare_qdiscs, compare_rate, parse_htb_classes, plan_egress

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
