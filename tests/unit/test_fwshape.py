"""The ``shape`` firewall action: its keys checked at load, its plan (ifbs, HTB + FIFO, ingress u32 filters) as
argument lists, its read-back against the kernel's listings and its counters."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from nest_experiments.config import FirewallConfig, parse_experiment
from nest_experiments.config.topology import load
from nest_experiments.net import fwshape, kernel, nftplan
from tests.unit.test_firewall_config import raw

DUMBBELL = load("topology", "dumbbell")
DATA = Path(__file__).resolve().parents[1] / "data" / "tc"
# the firewalls that made tests/data/tc/fwshape_*.json (Network on the host, then tc -j / ip -j in r1's namespace)
STORED = [FirewallConfig(name="udp443", router="r1", port=443, action="shape", rate_bps=200_000, queue_pkts=50),
          FirewallConfig(name="tcp80", router="r1", port=8080, proto="tcp", direction="to_port", action="shape",
                         rate_bps=1_000_000)]


def stored_plan() -> fwshape.ShapePlan:
    [plan] = fwshape.plan_shapers(STORED, DUMBBELL, lambda router: f"nxtest-{router}")
    return plan


def data(name: str) -> list[dict[str, Any]]:
    return fwshape.parse_tc_json((DATA / f"fwshape_{name}.json").read_text())


# ---------------------------------------------------------------- config


def test_shape_loads_with_a_queue_of_ten_by_default() -> None:
    [fw] = parse_experiment(raw(action="shape", rate="64kbit")).firewalls
    assert (fw.action, fw.rate_bps, fw.queue_pkts) == ("shape", 64_000, 10)
    assert parse_experiment(raw(action="shape", rate="64kbit", queue=10_000)).firewalls[0].queue_pkts == 10_000


def test_a_shape_firewall_needs_ifb_and_ingress_from_the_kernel() -> None:
    exp = parse_experiment(raw(action="shape", rate="64kbit"))
    needed = kernel.features_needed(exp)
    assert needed["ifb"] == needed["ingress"] == "firewalls.udp443.action"
    assert "ifb" not in kernel.features_needed(parse_experiment(raw(rate="64kbit")))


# ---------------------------------------------------------------- plan


def test_each_direction_gets_an_ifb_with_htb_at_the_rate_and_a_fifo_of_the_queue() -> None:
    plan = stored_plan()
    assert (plan.ns, plan.router, plan.devs) == ("nxtest-r1", "r1", ("h1", "h2", "r2"))
    assert [(s.firewall, s.direction, s.ifb, s.prio) for s in plan.shapers] == [
        ("udp443", "to_port", "fw0t", 1), ("udp443", "from_port", "fw0f", 2), ("tcp80", "to_port", "fw1t", 3)]
    assert plan.link_commands()[:2] == [["link", "add", "fw0t", "type", "ifb"], ["link", "set", "fw0t", "up"]]
    assert [" ".join(c) for c in plan.shapers[0].egress.commands[1:]] == [
        "tc -n nxtest-r1 qdisc add dev fw0t root handle 1: htb default 1",
        "tc -n nxtest-r1 class add dev fw0t parent 1: classid 1:1 htb rate 200kbit ceil 200kbit",
        "tc -n nxtest-r1 qdisc add dev fw0t parent 1:1 handle 10: pfifo limit 50"]
    assert plan.shapers[2].egress.commands[-1][-2:] == ("limit", "10")


def test_every_interface_of_the_router_redirects_each_direction_to_its_ifb() -> None:
    cmds = [" ".join(c) for c in stored_plan().filter_commands()]
    assert cmds[:3] == [f"tc -n nxtest-r1 qdisc add dev {d} handle ffff: ingress" for d in ("h1", "h2", "r2")]
    assert cmds[3] == ("tc -n nxtest-r1 filter add dev h1 parent ffff: protocol ip prio 1 u32 match ip protocol 17 "
                       "0xff match ip dport 443 0xffff action mirred egress redirect dev fw0t")
    assert "prio 2 u32 match ip protocol 17 0xff match ip sport 443 0xffff action mirred egress redirect dev fw0f" \
        in cmds[4]
    assert "prio 3 u32 match ip protocol 6 0xff match ip dport 8080 0xffff" in cmds[5]
    assert len(cmds) == 3 + 3 * 3


def test_offloads_go_off_on_both_ends_of_the_routers_links() -> None:
    assert stored_plan().no_offloads == (("h1", "r1"), ("h2", "r1"), ("r1", "h1"), ("r1", "h2"), ("r1", "r2"),
                                         ("r2", "r1"))


def test_a_router_without_a_shape_firewall_gets_no_plan_and_indexes_follow_the_routers_firewalls() -> None:
    fws = [FirewallConfig(name="lim", router="r1", port=443, rate_bps=64_000),
           FirewallConfig(name="sh", router="r1", port=443, action="shape", rate_bps=64_000, direction="from_port"),
           FirewallConfig(name="block", router="r2", port=443, action="drop")]
    [plan] = fwshape.plan_shapers(fws, DUMBBELL, str)
    assert [(s.ifb, s.prio) for s in plan.shapers] == [("fw1f", 1)]


def test_the_nft_table_of_a_shape_firewall_only_counts() -> None:
    [plan] = nftplan.plan_firewalls(STORED, str)
    script = plan.script()
    assert "udp443:to_port:matched" in script and "dropped" not in script and "limit" not in script


# ---------------------------------------------------------------- read-back and counters


def test_the_kernels_listings_match_the_plan() -> None:
    plan = stored_plan()
    assert fwshape.compare_links(plan, json.loads((DATA / "fwshape_links.json").read_text())) == []
    assert fwshape.compare_ingress(plan, data("qdiscs")) == []
    for dev in plan.devs:
        assert fwshape.compare_filters(plan, dev, data(f"filters_{dev}")) == []


def test_u32_keys_printed_twice_in_one_object_are_all_kept() -> None:
    rules = [f for f in data("filters_h1") if "match" in f.get("options", {})]
    assert len(rules) == 3 and all(len(r["options"]["match"]) == 2 for r in rules)


def test_the_read_back_finds_a_missing_ifb_a_wrong_port_a_wrong_target_and_a_missing_ingress() -> None:
    plan = stored_plan()
    links = [link for link in json.loads((DATA / "fwshape_links.json").read_text()) if link["ifname"] != "fw0f"]
    assert fwshape.compare_links(plan, links) == ["r1: ifb fw0f is missing"]
    down = copy.deepcopy(json.loads((DATA / "fwshape_links.json").read_text()))
    down[0]["flags"].remove("UP")
    assert "is not up" in fwshape.compare_links(plan, down)[0]
    filters = copy.deepcopy(data("filters_r2"))
    prio1 = next(f for f in filters if f.get("pref") == 1 and "match" in f.get("options", {}))
    prio1["options"]["match"][1]["value"] = "1bc"  # port 444
    prio2 = next(f for f in filters if f.get("pref") == 2 and "match" in f.get("options", {}))
    prio2["options"]["actions"][0]["to_dev"] = "fw0t"
    problems = fwshape.compare_filters(plan, "r2", filters)
    assert len(problems) == 2
    assert "r1/r2 ingress filter prio 1 (udp443:to_port): matches" in problems[0] and "dport 443" in problems[0]
    assert "prio 2 (udp443:from_port): redirects to fw0t, expected ifb fw0f" in problems[1]
    no_h2 = [q for q in data("qdiscs") if not (q.get("dev") == "h2" and q.get("kind") == "ingress")]
    assert fwshape.compare_ingress(plan, no_h2) == ["r1/h2: no ingress qdisc ffff:"]
    assert "0 u32 rules, expected 1" in fwshape.compare_filters(plan, "h1", [])[0]


def test_counter_rows_take_the_redirected_packets_and_the_fifos_drops() -> None:
    plan = stored_plan()
    filters = {dev: data(f"filters_{dev}") for dev in plan.devs}
    row = fwshape.counter_row(plan, plan.shapers[0], filters, data("qdisc_ifb"))
    assert list(row) == list(nftplan.COUNTER_FIELDS)
    # the capture: 200 datagrams of 1000 bytes (1028-byte IP packets) from h1 to s1:443 in 0.4 s into a 50-packet
    # FIFO at 200 kbit/s
    assert (row["matched_pkts"], row["matched_bytes"]) == (200, 200 * 1028)
    assert row["dropped_pkts"] == 138 and row["dropped_bytes"] == ""  # 62 arrived: nft counted 62 (63736 bytes)
    other = fwshape.counter_row(plan, plan.shapers[2], filters, data("qdisc_ifb"))
    assert (other["matched_pkts"], other["action"], other["rate_bps"]) == (0, "shape", 1_000_000)
