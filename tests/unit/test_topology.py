from __future__ import annotations

import ipaddress

import pytest

from nest_experiments.config import topology as topo
from nest_experiments.errors import ConfigError


def test_dumbbell_addresses_and_routes() -> None:
    spec = topo.load("experiment.topology", "dumbbell")
    assert spec.address_of("h1") == ipaddress.IPv4Address("10.0.0.1")
    assert spec.address_of("s1") == ipaddress.IPv4Address("10.0.3.2")
    routes = {(r.node, str(r.dest)): (str(r.via), r.dev) for r in topo.routes(spec)}
    assert routes[("h1", "10.0.3.0/24")] == ("10.0.0.2", "r1")  # via r1
    assert routes[("r1", "10.0.3.0/24")] == ("10.0.2.2", "r2")  # across the bottleneck
    assert routes[("s1", "10.0.0.0/24")] == ("10.0.3.1", "r2")
    assert topo.path_links(spec, "h1", spec.address_of("s1")) == ["h1_r1", "bottleneck", "r2_s1"]


def test_hosts_do_not_forward() -> None:
    spec = topo.load("t", "multihomed_dumbbell")
    # h1 reaches s3's subnet only through routers; h2 is a host and must not be a transit hop
    path = topo.path_links(spec, "h1", spec.link("r4_s3").address("s3", 0).ip)
    assert "h2_r1" not in path and "h2_r2" not in path


def test_multihomed_paths_and_source_routing() -> None:
    spec = topo.load("t", "multihomed_dumbbell")
    s2_a = spec.link("r3_s2").address("s2", 0).ip
    s2_b = spec.link("r4_s2").address("s2", 0).ip
    assert topo.path_links(spec, "h2", s2_a) == ["h2_r1", "bn1", "r3_s2"]
    assert topo.path_links(spec, "h2", s2_b) == ["h2_r2", "bn2", "r4_s2"]
    assert topo.path_links(spec, "h1", spec.address_of("s1")) == ["h1_r1", "bn1", "r3_s1"]
    assert topo.path_links(spec, "h3", spec.link("r4_s3").address("s3", 0).ip) == ["h3_r2", "bn2", "r4_s3"]
    table_routes, rules = topo.source_routing(spec)
    assert {r.node for r in rules} == {"h2", "s2"}
    assert len(table_routes) == 4 and all(r.table and r.table >= 100 for r in table_routes)


def test_topology_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="no topology 'ring'"):
        topo.load("experiment.topology", "ring")
    with pytest.raises(ConfigError, match="two different nodes"):
        topo.parse("x", {"nodes": {"a": "host", "b": "host"}, "links": {"l": {"a": "a", "b": "a"}}})
    with pytest.raises(ConfigError, match="not one of host, router"):
        topo.parse("x", {"nodes": {"a": "switch"}, "links": {}})


def test_a_one_node_topology_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match=r"^f\.toml\.nodes: a topology needs at least two nodes, got 1"):
        topo.parse("x", {"nodes": {"a": "host"}, "links": {}}, where="f.toml")
    with pytest.raises(ConfigError, match="at least two nodes, got 0"):
        topo.parse("x", {"nodes": {}, "links": {}}, where="f.toml")


def test_a_node_without_links_is_refused_at_load() -> None:
    data = {"nodes": {"c": "host", "r": "router", "s": "host", "lonely": "host"},
            "links": {"access": {"a": "c", "b": "r"}, "bottleneck": {"a": "r", "b": "s"}}}
    with pytest.raises(ConfigError, match=r"^f\.toml\.nodes\.lonely: has no link: add a \[links\.<name>\] "
                                          r"with a or b = 'lonely'"):
        topo.parse("x", data, where="f.toml")
    del data["nodes"]["lonely"]
    spec = topo.parse("x", data, where="f.toml")  # the same graph without it loads, and every node has an address
    assert [str(spec.address_of(n)) for n in spec.nodes] == ["10.0.0.1", "10.0.0.2", "10.0.1.2"]


def test_two_nodes_and_no_links_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\.nodes\.a: has no link"):
        topo.parse("x", {"nodes": {"a": "host", "b": "host"}}, where="f.toml")
