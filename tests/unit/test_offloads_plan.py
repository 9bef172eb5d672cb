"""Which interfaces lose their offloads (net.network.no_offloads): both ends of every link of a node that shapes."""

from __future__ import annotations

from typing import Any

from nest_experiments.config import parse_experiment
from nest_experiments.config.topology import load
from nest_experiments.net.network import no_offloads


def plan(topology: str, links: dict[str, Any]) -> set[tuple[str, str]]:
    exp = parse_experiment({"experiment": {"name": "t", "topology": topology, "duration": "5s"}, "links": links})
    return set(no_offloads(exp.links, load("topology", topology)))


def test_every_link_of_the_shaping_routers_loses_them_the_senders_side_too() -> None:
    got = plan("dumbbell", {})  # the bottleneck's 10 Mbit/s: r1 and r2 shape
    assert got == {("h1", "r1"), ("r1", "h1"), ("h2", "r1"), ("r1", "h2"), ("r1", "r2"), ("r2", "r1"),
                   ("r2", "s1"), ("s1", "r2"), ("r2", "s2"), ("s2", "r2")}


def test_a_link_away_from_every_shaper_keeps_them() -> None:
    assert plan("chain", {"access": {"forward": {"rate": "1mbit"}}}) == {("c", "r"), ("r", "c")}  # only c shapes
    assert plan("chain", {}) == set()  # nothing shaped


def test_offloads_true_keeps_a_links_own() -> None:
    got = plan("dumbbell", {"h1_r1": {"offloads": True}})
    assert ("h1", "r1") not in got and ("r1", "h1") not in got and ("h2", "r1") in got
