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
              for name, p in spec.params.items() if not p.readback]  # fmt: skip
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


# ---------------------------------------------------------------- netem's parameters read back (tests/data/tc/netem_*)

NETEM_PIE = EgressConfig(rate_bps=10**7, delay_s=0.02, jitter_s=0.005, loss_pct=1.0, qdisc=PIE)


def with_netem(dump: list[dict[str, Any]], **options: Any) -> list[dict[str, Any]]:
    """``dump`` with its netem's options changed (as if someone ran ``tc qdisc change`` behind our back)."""
    return [{**q, "options": {**q["options"], **options}} if q["kind"] == "netem" else q for q in dump]


def test_netem_plans_its_limit_delay_jitter_and_loss() -> None:
    plan = plan_egress("ns", "r2", NETEM_PIE)
    assert plan.qdiscs[0].options == (("limit", 100_000), ("delay", 20_000), ("jitter", 5_000), ("loss", 1.0))
    loss_only = plan_egress("ns", "r2", EgressConfig(loss_pct=0.5)).qdiscs[0].options
    assert loss_only == (("limit", 100_000), ("delay", 0), ("loss", 0.5))  # tc is given no delay, hence no jitter


def test_a_netem_as_planned_reads_back_clean() -> None:
    assert compare_qdiscs(plan_egress("ns", "r2", NETEM_PIE), shown("netem_htb_pie.json")) == []
    assert compare_qdiscs(plan_egress("ns", "r2", EgressConfig(loss_pct=0.5)), shown("netem_loss_only.json")) == []


def test_a_netem_delay_changed_behind_our_back_is_reported_by_device_and_name() -> None:
    dump = with_netem(shown("netem_htb_pie.json"), delay={"delay": 0.03, "jitter": 0.005, "correlation": 0})
    assert compare_qdiscs(plan_egress("ns", "r2", NETEM_PIE), dump) == ["ns/r2 1:: netem delay is 30000, expected 20000"]


def test_a_netem_jitter_changed_behind_our_back_is_reported() -> None:
    dump = with_netem(shown("netem_htb_pie.json"), delay={"delay": 0.02, "jitter": 0, "correlation": 0})
    assert compare_qdiscs(plan_egress("ns", "r2", NETEM_PIE), dump) == ["ns/r2 1:: netem jitter is 0, expected 5000"]


def test_a_netem_loss_changed_or_removed_behind_our_back_is_reported() -> None:
    plan = plan_egress("ns", "r2", NETEM_PIE)
    dump = with_netem(shown("netem_htb_pie.json"), **{"loss-random": {"loss": 0.05, "correlation": 0}})
    assert compare_qdiscs(plan, dump) == ["ns/r2 1:: netem loss is 5, expected 1"]
    gone = [{**q, "options": {k: v for k, v in q["options"].items() if k != "loss-random"}} for q in shown("netem_htb_pie.json")]
    assert compare_qdiscs(plan, gone) == ["ns/r2 1:: netem loss is 0, expected 1"]  # tc prints no loss of 0


def test_a_delay_added_to_a_loss_only_netem_is_reported() -> None:
    dump = with_netem(shown("netem_loss_only.json"), delay={"delay": 0.1, "jitter": 0, "correlation": 0})
    assert compare_qdiscs(plan_egress("ns", "r2", EgressConfig(loss_pct=0.5)), dump) == [
        "ns/r2 1:: netem delay is 100000, expected 0"]


def test_netem_times_within_the_kernels_tick_and_percent_printing_pass() -> None:
    # 12345 us is 192890.625 ticks of 64 ns: iproute2 6.1 truncates to 192890 and prints 12344 us back; 0.7% is
    # rint(0.007 * (2**32 - 1)) / (2**32 - 1), which %g prints as 0.007, read back as 0.7000000000000001 percent
    plan = plan_egress("ns", "r2", EgressConfig(delay_s=0.012345, loss_pct=0.7))
    dump = with_netem(shown("netem_loss_only.json"), delay={"delay": 0.012344, "jitter": 0, "correlation": 0},
                      **{"loss-random": {"loss": 0.007, "correlation": 0}})
    assert compare_qdiscs(plan, dump) == []
    off = with_netem(dump, **{"loss-random": {"loss": 0.0071, "correlation": 0}})  # 0.71%: not printing, a change
    assert compare_qdiscs(plan, off) == ["ns/r2 1:: netem loss is 0.71, expected 0.7"]


def test_netem_options_tc_did_not_print_are_named_not_assumed() -> None:
    bare = [{**q, "options": {}} for q in shown("netem_loss_only.json")]  # an iproute2 that prints no netem options
    assert compare_qdiscs(plan_egress("ns", "r2", EgressConfig(loss_pct=0.5)), bare) == [
        "ns/r2 1:: netem limit, delay, loss cannot be read back: `tc -j qdisc show` does not report them"
        " (iproute2 too old for this qdisc?)"]
    # a jitter without a delay: iproute2 6.1 prints neither, so the jitter is named, not taken for 0
    jitter_only = plan_egress("ns", "r2", EgressConfig(jitter_s=0.005))
    no_delay_no_loss = [{"kind": "netem", "handle": "1:", "root": True, "options": {"limit": 100000, "ecn": False, "gap": 0}}]
    assert compare_qdiscs(jitter_only, no_delay_no_loss) == [
        "ns/r2 1:: netem jitter cannot be read back: `tc -j qdisc show` does not report them"
        " (iproute2 too old for this qdisc?)"]
