"""Firewalls: ``[firewalls.NAME]`` validated at load, planned as nftables rules, read back, counted."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.config import FirewallConfig, parse_experiment
from nest_experiments.config.sweep import expand
from nest_experiments.errors import ConfigError
from nest_experiments.net import nftplan

DATA = Path(__file__).resolve().parents[1] / "data" / "nft"
# the plan that made tests/data/nft/firewalls.json (nft -f - in a namespace here, then nft -j list table)
STORED = [FirewallConfig(name="udp443", router="r1", port=443, rate_bps=64000, burst_bytes=1500),
          FirewallConfig(name="block", router="r1", port=8443, proto="tcp", direction="to_port", action="drop"),
          FirewallConfig(name="count", router="r1", port=5060, direction="from_port", action="accept")]


def raw(**firewall: Any) -> dict[str, Any]:
    return {"experiment": {"name": "fw", "topology": "dumbbell", "duration": "10s"},
            "firewalls": {"udp443": {"router": "r1", "port": 443, **firewall}}}


def listing() -> dict[str, Any]:
    return dict(json.loads((DATA / "firewalls.json").read_text()))


def stored_plan() -> nftplan.FirewallPlan:
    [plan] = nftplan.plan_firewalls(STORED, lambda router: f"nxtest-{router}")
    return plan


def test_the_key_loads_with_its_defaults() -> None:
    [fw] = parse_experiment(raw(rate="64kbit")).firewalls
    assert fw == FirewallConfig(name="udp443", router="r1", port=443, proto="udp", direction="both", action="limit",
                                rate_bps=64_000, burst_bytes=0)
    assert parse_experiment(raw(action="drop")).firewalls[0].action == "drop"
    assert parse_experiment({k: v for k, v in raw().items() if k != "firewalls"}).firewalls == ()


@pytest.mark.parametrize(("firewall", "key", "words"), [
    ({"rate": "64kbit", "router": "h1"}, "firewalls.udp443.router", "'h1' is not one of r1, r2"),
    ({}, "firewalls.udp443.rate", "action = 'limit' needs a rate"),
    ({"rate": "64kbps"}, "firewalls.udp443.rate", "write bits"),
    ({"rate": "64kbit", "port": 70000}, "firewalls.udp443.port", "1-65535"),
    ({"rate": "64kbit", "proto": "icmp"}, "firewalls.udp443.proto", "not one of udp, tcp"),
    ({"action": "block"}, "firewalls.udp443.action", "not one of limit, shape, drop, accept"),
    ({"action": "drop", "burst": "3kb"}, "firewalls.udp443.burst", "action = 'limit' only"),
    ({"rate": "64kbit", "direction": "up"}, "firewalls.udp443.direction", "not one of both, to_port, from_port"),
    ({"rate": "64kbit", "dport": 443}, "firewalls.udp443.dport", "unknown key"),
    ({"rate": "4bit"}, "firewalls.udp443.rate", ">= 8bit"),
    ({"action": "shape"}, "firewalls.udp443.rate", "action = 'shape' needs a rate"),
    ({"action": "shape", "rate": "64kbit", "queue": 0}, "firewalls.udp443.queue", "expected 1-10000 packets"),
    ({"action": "shape", "rate": "64kbit", "queue": 10_001}, "firewalls.udp443.queue", "expected 1-10000 packets"),
    ({"action": "shape", "rate": "64kbit", "queue": "10"}, "firewalls.udp443.queue", "expected 1-10000 packets"),
    ({"action": "limit", "rate": "64kbit", "queue": 20}, "firewalls.udp443.queue", "action = 'shape' only"),
    ({"action": "shape", "rate": "64kbit", "burst": "3kb"}, "firewalls.udp443.burst", "action = 'limit' only"),
    ({"action": "shaper"}, "firewalls.udp443.action", "did you mean 'shape'"),
])
def test_bad_values_name_their_key_in_one_line(firewall: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment(raw(**firewall))
    assert info.value.path == key and words in str(info.value) and "\n" not in str(info.value)


def test_a_sweep_may_vary_the_action_with_the_rate_set() -> None:
    doc = raw(rate="64kbit")
    doc["sweep"] = {"firewalls.udp443.action": ["accept", "limit", "drop", "shape"]}
    assert [r.experiment.firewalls[0].action for r in sorted(expand(doc), key=lambda r: r.name)] == \
        ["accept", "drop", "limit", "shape"]


def test_the_script_has_a_counter_and_a_policer_per_direction() -> None:
    script = stored_plan().script().splitlines()
    assert script[1] == ("add chain inet nest_experiments forward { type filter hook forward priority 0 ; "
                         "policy accept ; }")
    assert ('add rule inet nest_experiments forward udp dport 443 limit rate over 8000 bytes/second burst 1500 bytes '
            'counter drop comment "udp443:to_port:dropped"') in script
    assert 'add rule inet nest_experiments forward udp sport 443 counter comment "udp443:from_port:matched"' in script
    assert 'add rule inet nest_experiments forward tcp dport 8443 counter drop comment "block:to_port:dropped"' in script
    assert not any("count:from_port:dropped" in line for line in script)  # accept: count only
    assert not any("sport 8443" in line for line in script)  # direction to_port only
    assert len(script) == 2 + 2 + 2 + 2 + 1


def test_the_kernels_listing_matches_the_plan() -> None:
    assert nftplan.compare(stored_plan(), listing()) == []


def _rule(doc: dict[str, Any], comment: str) -> dict[str, Any]:
    return next(i["rule"] for i in doc["nftables"] if i.get("rule", {}).get("comment") == comment)


def test_the_read_back_finds_a_wrong_rate_a_missing_rule_and_a_missing_chain() -> None:
    doc = listing()
    limit = next(e["limit"] for e in _rule(doc, "udp443:from_port:dropped")["expr"] if "limit" in e)
    limit["rate"] = 16000
    doc["nftables"] = [i for i in doc["nftables"] if i.get("rule", {}).get("comment") != "block:to_port:dropped"]
    problems = nftplan.compare(stored_plan(), doc)
    assert len(problems) == 2
    assert "udp443:from_port:dropped" in problems[0] and "16000 bytes/second" in problems[0]
    assert "'block:to_port:dropped' is missing" in problems[1]
    no_chain = {"nftables": [i for i in listing()["nftables"] if "chain" not in i]}
    assert "no chain forward" in nftplan.compare(stored_plan(), no_chain)[0]


def test_a_rate_listed_in_kbytes_is_the_same_rate() -> None:
    [plan] = nftplan.plan_firewalls([FirewallConfig(name="k", router="r1", port=443, rate_bps=8 * 2048)], str)
    doc = listing()
    for item in doc["nftables"]:
        rule = item.get("rule")
        if rule:
            rule["comment"] = rule["comment"].replace("udp443", "k")
            for e in rule["expr"]:
                if "limit" in e:
                    e["limit"].update(rate=2, rate_unit="kbytes", burst=0)
    assert nftplan.compare(plan, doc) == []


def test_counter_rows_per_firewall_and_direction() -> None:
    doc = copy.deepcopy(listing())
    for comment, (pkts, size) in {"udp443:to_port:matched": (100, 120_000), "udp443:to_port:dropped": (40, 50_000),
                                  "count:from_port:matched": (7, 700)}.items():
        next(e for e in _rule(doc, comment)["expr"] if "counter" in e)["counter"].update(packets=pkts, bytes=size)
    rows = {(r["firewall"], r["direction"]): r for r in nftplan.counter_rows(stored_plan(), doc)}
    assert set(rows) == {("udp443", "to_port"), ("udp443", "from_port"), ("block", "to_port"), ("count", "from_port")}
    assert rows[("udp443", "to_port")] == {
        "firewall": "udp443", "router": "r1", "direction": "to_port", "proto": "udp", "port": 443, "action": "limit",
        "rate_bps": 64000, "matched_pkts": 100, "matched_bytes": 120_000, "dropped_pkts": 40, "dropped_bytes": 50_000}
    assert (rows[("count", "from_port")]["matched_pkts"], rows[("count", "from_port")]["dropped_pkts"]) == (7, 0)
    assert list(rows[("block", "to_port")]) == list(nftplan.COUNTER_FIELDS)


def test_paper_may_set_a_firewall_key() -> None:
    from nest_experiments.config.sweep import apply_paper

    doc = raw(rate="64kbit")
    doc["paper"] = {"firewalls.udp443.rate": "128kbit"}
    assert parse_experiment(apply_paper(doc)).firewalls[0].rate_bps == 128_000
