"""Topologies as pure data: nodes, links, addresses and routes.

A topology file (``topologies/<name>.toml``) declares nodes (with a role,
``host`` or ``router``) and links (two endpoints and link defaults such as
``rate``). Addresses and routes are computed here, without touching the
system; :mod:`nest_experiments.net` realises a :class:`TopologySpec`.

Addressing: link number *i* (in file order, from 0) gets ``10.<base>.<i>.0/24``
with ``.1`` on endpoint ``a`` and ``.2`` on ``b``. Routing: every node gets a
route to every subnet it is not on, via the neighbour on a shortest path
through routers (hosts never forward); ties are broken by name, so routes are
deterministic. A host with several interfaces also gets one routing table per
interface (``table 100+k``, selected by a rule on its source address) so that
MPTCP subflows leave through the interface whose address they carry.
"""

from __future__ import annotations

import ipaddress
import tomllib
from collections import deque
from dataclasses import dataclass
from typing import Any

from nest_experiments import resources
from nest_experiments.config.tomlread import Table, as_name, as_str, one_of
from nest_experiments.errors import ConfigError

TOPOLOGY_DIR = resources.data(resources.TOPOLOGIES)
ROLES = ("host", "router")


@dataclass(frozen=True, kw_only=True)
class LinkSpec:
    """A point-to-point link; ``defaults`` are link settings (rate, delay, qdisc...)."""

    name: str
    a: str
    b: str
    index: int
    defaults: dict[str, Any]

    def subnet(self, base: int) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"10.{base}.{self.index}.0/24")

    def address(self, node: str, base: int) -> ipaddress.IPv4Interface:
        host = 1 if node == self.a else 2
        return ipaddress.IPv4Interface(f"10.{base}.{self.index}.{host}/24")

    def peer(self, node: str) -> str:
        return self.b if node == self.a else self.a

    def ifname(self, node: str) -> str:
        """Interface name of ``node``'s end: named after the peer (``r1`` on h1's side)."""
        return f"{self.peer(node)}"[:15]


@dataclass(frozen=True, kw_only=True)
class Route:
    node: str
    dest: ipaddress.IPv4Network
    via: ipaddress.IPv4Address
    dev: str
    table: int | None = None  # None: main table


@dataclass(frozen=True, kw_only=True)
class SourceRule:
    node: str
    source: ipaddress.IPv4Address
    table: int


@dataclass(frozen=True, kw_only=True)
class TopologySpec:
    name: str
    description: str
    nodes: dict[str, str]  # name -> role
    links: tuple[LinkSpec, ...]
    base: int = 0  # second octet of every address

    def link(self, name: str) -> LinkSpec:
        for link in self.links:
            if link.name == name:
                return link
        raise KeyError(name)

    def links_of(self, node: str) -> list[LinkSpec]:
        return [link for link in self.links if node in (link.a, link.b)]

    def addresses(self, node: str) -> list[ipaddress.IPv4Interface]:
        return [link.address(node, self.base) for link in self.links_of(node)]

    def address_of(self, node: str) -> ipaddress.IPv4Address:
        """The node's primary address (on its first link): what apps connect to."""
        return self.addresses(node)[0].ip


def available() -> list[str]:
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.toml"))


def load(path: str, name: str) -> TopologySpec:
    """Load ``topologies/<name>.toml``; ``path`` is the config key that named it."""
    file = TOPOLOGY_DIR / f"{name}.toml"
    if not file.is_file():
        raise ConfigError(path, f"no topology {name!r}; available: {', '.join(available())} (in {TOPOLOGY_DIR})")
    with file.open("rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(str(file), f"not valid TOML: {exc}") from exc
    return parse(name, data, where=str(file))


def parse(name: str, data: dict[str, Any], *, where: str = "") -> TopologySpec:
    top = Table(where, data)
    description = top.get("description", as_str, "")
    nodes_t = top.table("nodes")
    nodes = {as_name(f"{where}.nodes", key, max_len=6): nodes_t.get(key, one_of(ROLES)) for key in nodes_t.data}
    if len(nodes) < 2:
        raise ConfigError(f"{where}.nodes", f"a topology needs at least two nodes, got {len(nodes)}: "
                                            "add a [nodes] entry (name = \"host\" or \"router\")")
    links_t = top.table("links")
    links = tuple(_parse_link(links_t.table(key), key, i, nodes) for i, key in enumerate(links_t.data))
    links_t.mark(*links_t.data)
    top.done()
    _check_every_node_linked(nodes, links, where)
    _check_unique_ifnames(nodes, links, where)
    return TopologySpec(name=name, description=description, nodes=nodes, links=links)


def _parse_link(t: Table, name: str, index: int, nodes: dict[str, str]) -> LinkSpec:
    as_name(t.path, name, max_len=15)
    node = one_of(tuple(nodes))
    a, b = t.get("a", node), t.get("b", node)
    if a == b:
        raise ConfigError(t.path, f"a link needs two different nodes, got {a!r} twice")
    defaults = {k: v for k, v in t.data.items() if k not in ("a", "b")}
    return LinkSpec(name=name, a=a, b=b, index=index, defaults=defaults)


def _check_every_node_linked(nodes: dict[str, str], links: tuple[LinkSpec, ...], where: str) -> None:
    linked = {end for link in links for end in (link.a, link.b)}
    for node in nodes:
        if node not in linked:
            raise ConfigError(f"{where}.nodes.{node}", "has no link: add a [links.<name>] with a or b = "
                                                       f"{node!r}, or remove the node")


def _check_unique_ifnames(nodes: dict[str, str], links: tuple[LinkSpec, ...], where: str) -> None:
    for node in nodes:
        peers = [link.peer(node) for link in links if node in (link.a, link.b)]
        if len(peers) != len(set(peers)):
            raise ConfigError(f"{where}.links", f"{node} has two links to the same node; give each pair one link")


def _neighbours(spec: TopologySpec, node: str) -> list[tuple[str, LinkSpec]]:
    return sorted(((link.peer(node), link) for link in spec.links_of(node)), key=lambda x: (x[0], x[1].index))


def _first_hops(spec: TopologySpec, start: str) -> dict[str, tuple[str, LinkSpec]]:
    """BFS from ``start``: for each reachable node, the first hop (neighbour, link)."""
    first: dict[str, tuple[str, LinkSpec]] = {}
    queue: deque[str] = deque()
    for peer, link in _neighbours(spec, start):
        if peer not in first:
            first[peer] = (peer, link)
            queue.append(peer)
    while queue:
        node = queue.popleft()
        if spec.nodes[node] != "router":
            continue  # hosts do not forward
        for peer, _ in _neighbours(spec, node):
            if peer != start and peer not in first:
                first[peer] = first[node]
                queue.append(peer)
    return first


def routes(spec: TopologySpec) -> list[Route]:
    """Main-table routes of every node to every subnet it is not attached to."""
    out: list[Route] = []
    for node in spec.nodes:
        first = _first_hops(spec, node)
        attached = {link.name for link in spec.links_of(node)}
        for link in spec.links:
            if link.name in attached:
                continue
            hop = _best_hop(first, link)
            if hop is not None:
                peer, via_link = hop
                out.append(Route(node=node, dest=link.subnet(spec.base), via=via_link.address(peer, spec.base).ip,
                                 dev=via_link.ifname(node)))
    return out


def _best_hop(first: dict[str, tuple[str, LinkSpec]], link: LinkSpec) -> tuple[str, LinkSpec] | None:
    # ``first`` is in BFS order, so the first end found is the nearer one
    ends = [end for end in first if end in (link.a, link.b)]
    return first[ends[0]] if ends else None


def source_routing(spec: TopologySpec) -> tuple[list[Route], list[SourceRule]]:
    """Per-interface tables for multi-homed hosts (MPTCP needs them)."""
    table_routes: list[Route] = []
    rules: list[SourceRule] = []
    for node, role in spec.nodes.items():
        links = spec.links_of(node)
        if role != "host" or len(links) < 2:
            continue
        for k, link in enumerate(links):
            table = 100 + k
            gateway = link.address(link.peer(node), spec.base).ip
            default = ipaddress.IPv4Network("0.0.0.0/0")
            table_routes.append(Route(node=node, dest=default, via=gateway, dev=link.ifname(node), table=table))
            rules.append(SourceRule(node=node, source=link.address(node, spec.base).ip, table=table))
    return table_routes, rules


def path_links(spec: TopologySpec, src: str, dst_addr: ipaddress.IPv4Address) -> list[str]:
    """Names of the links a packet from ``src`` to ``dst_addr`` crosses (main tables)."""
    table = routes(spec)
    node, crossed = src, list[str]()
    for _ in range(len(spec.nodes) + 1):
        for link in spec.links_of(node):
            if dst_addr in link.subnet(spec.base):
                return crossed + [link.name]
        route = next((r for r in table if r.node == node and dst_addr in r.dest), None)
        if route is None:
            return crossed
        link = next(lk for lk in spec.links_of(node) if lk.ifname(node) == route.dev)
        crossed.append(link.name)
        node = link.peer(node)
    return crossed
