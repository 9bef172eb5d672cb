"""The experiment's core: links, firewalls, the run's settings, the loading of a file; each app kind's
dataclass and parser live in a module of its own (:mod:`.traffic`, :mod:`.dash`, :mod:`.objects`), declared in
:mod:`.kinds`; :mod:`.experiment` puts an experiment together. The package's docstring shows a file."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from nest_experiments import resources
from nest_experiments.config import toollimits, traces
from nest_experiments.config import topology as topo
from nest_experiments.config.qdiscs import qdisc_kinds
from nest_experiments.config.tomlread import Table, as_bool, as_int, as_name, as_str, join, one_of, positive_int
from nest_experiments.errors import ConfigError
from nest_experiments.units import parse_percent, parse_rate, parse_size, parse_time

DEFAULT_EXPERIMENT = Path(__file__).parents[1] / "default.toml"
RUNTIMES = ("auto", "host", "router", "vm")
CONGESTION_CONTROLS = ("cubic", "reno", "bbr", "htcp", "vegas", "dctcp")
DEFAULT_FIFO_LIMIT = 1000


# ---------------------------------------------------------------- dataclasses


@dataclass(frozen=True, kw_only=True)
class QdiscConfig:
    """A leaf qdisc and its parameters, normalised (times in s, sizes in bytes)."""

    kind: str
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)


@dataclass(frozen=True, kw_only=True)
class EgressConfig:
    """What shapes one direction of a link, at the sending interface."""

    rate_bps: int | None = None  # with a trace: the trace's first rate (the HTB class starts at it)
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss_pct: float = 0.0
    qdisc: QdiscConfig | None = None
    trace: traces.Trace | None = None  # the rate follows this trace (nest_experiments.runs.traceplay)
    trace_step_s: float = traces.DEFAULT_STEP_S

    def trace_steps(self, until_s: float) -> tuple[tuple[float, int], ...]:
        """The HTB rate changes (t, rate_bps) of the trace over [0, until_s); () without a trace."""
        if self.trace is None:
            return ()
        return traces.htb_steps(self.trace.steps(self.trace_step_s, until_s), self.trace_step_s)

    @property
    def needs_netem(self) -> bool:
        return self.delay_s > 0 or self.loss_pct > 0 or self.jitter_s > 0

    @property
    def shaped(self) -> bool:
        return self.rate_bps is not None or self.needs_netem or self.qdisc is not None


@dataclass(frozen=True, kw_only=True)
class LinkConfig:
    name: str
    a: str
    b: str
    forward: EgressConfig  # a -> b, at a's interface
    reverse: EgressConfig  # b -> a, at b's interface
    offloads: bool = False
    # the router runtime: through the guest even where the host has what its egresses need, so that every cell of
    # a design crosses one path (RTT 0 beside 50 and 150 ms of netem); the host and VM runtimes have one path anyway
    through_router: bool = False

    def egresses(self) -> list[tuple[str, str, EgressConfig]]:
        """(node, peer, egress) for both directions."""
        return [(self.a, self.b, self.forward), (self.b, self.a, self.reverse)]


@dataclass(frozen=True, kw_only=True)
class AppConfig:
    name: str
    kind: str
    start_s: float = 0.0



FIREWALL_PROTOCOLS = ("udp", "tcp")
FIREWALL_ACTIONS = ("limit", "shape", "drop", "accept")  # accept: count only (a control condition with the same counters)
FIREWALL_DIRECTIONS = ("both", "to_port", "from_port")
FIREWALL_QUEUE_MAX = 10_000  # packets


@dataclass(frozen=True, kw_only=True)
class FirewallConfig:
    """``[firewalls.NAME]``: packets of ``proto`` to and/or from ``port`` crossing ``router`` are rate-limited
    (policed or shaped), dropped or only counted (nftables, :mod:`nest_experiments.net.nftplan`; the shaper:
    :mod:`nest_experiments.net.fwshape`).

    ``direction``: ``to_port`` matches the destination port (client -> server), ``from_port`` the source port
    (server -> client), ``both`` each with a limit of its own. With ``action = "limit"``, ``rate`` is a policer's:
    what exceeds it is dropped at once; ``burst`` (bytes) is added to its bucket of one second of ``rate``
    (nftables' byte limit). With ``action = "shape"``, ``rate`` is a shaper's (a tc HTB class on an ifb device
    in the router's namespace): what exceeds it waits in a FIFO of ``queue`` packets and only what finds the FIFO
    full is dropped, so the matching flow's RTT grows by up to ``queue`` packets at ``rate`` (10 QUIC packets of
    1252 bytes at 64 kbit/s: 10 x 1252 x 8 / 64000 = 1.6 s), as behind the racing paper's "qdisc" firewall.
    """

    name: str
    router: str
    port: int
    proto: str = "udp"
    direction: str = "both"
    action: str = "limit"
    rate_bps: int | None = None  # required by action = "limit" and "shape"; allowed (unused) with the others, for sweeps
    burst_bytes: int = 0  # limit only
    queue_pkts: int = 10  # shape only: the FIFO behind the shaper, in packets


#: ``net.ipv4.tcp_ecn``: 0 never, 1 request ECN on outgoing connections and accept it, 2 accept it only when the
#: peer requests it (the kernel's default in every namespace: with 2 at both ends no flow negotiates ECN)
TCP_ECN_MODES = {0: "off", 1: "request and accept", 2: "accept only (the kernel's default)"}


@dataclass(frozen=True, kw_only=True)
class NodeConfig:
    """``[nodes.NAME]``: settings of one node's namespace, applied before any app starts and read back."""

    name: str
    tcp_ecn: int | None = None  # None: the kernel's default (2)

    def sysctls(self) -> dict[str, str]:
        return {} if self.tcp_ecn is None else {"net.ipv4.tcp_ecn": str(self.tcp_ecn)}


def _parse_nodes(t: Table, spec: topo.TopologySpec) -> tuple[NodeConfig, ...]:
    nodes = []
    for name in t.data:
        if name not in spec.nodes:
            raise ConfigError(join(t.path, name), f"no node {name!r} in topology {spec.name!r}; nodes: "
                                                  f"{', '.join(spec.nodes)}")
        n = t.table(name)
        nodes.append(NodeConfig(name=name, tcp_ecn=n.get("tcp_ecn", _tcp_ecn, None)))
        n.done()
    return tuple(nodes)


def _tcp_ecn(path: str, value: object) -> int:
    if isinstance(value, bool) or value not in TCP_ECN_MODES:
        modes = ", ".join(f"{k} ({v})" for k, v in TCP_ECN_MODES.items())
        raise ConfigError(path, f"expected {modes} (net.ipv4.tcp_ecn), got {value!r}")
    return int(value)  # type: ignore[call-overload]


@dataclass(frozen=True, kw_only=True)
class Experiment:
    name: str
    description: str
    topology: topo.TopologySpec
    duration_s: float
    repetitions: int
    seed: int
    congestion_control: str
    runtime: str
    sample_interval_s: float
    sample_links: tuple[str, ...]
    links: tuple[LinkConfig, ...]
    apps: tuple[AppConfig, ...]
    qdelay_links: tuple[str, ...] = ()  # forward egress (a -> b) queue delay from captures (collectors/capture.py)
    keep_captures: bool = False  # keep the pcaps after qdelay.csv (wire.csv) is written
    end_when_done: bool = False  # the traffic ends once every app is done (App.done), at the latest at duration
    wire_links: tuple[str, ...] = ()  # bytes on the wire, both directions, from captures (collectors/wire.py)
    firewalls: tuple[FirewallConfig, ...] = ()
    nodes: tuple[NodeConfig, ...] = ()  # only the nodes with a [nodes.NAME] table
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def link(self, name: str) -> LinkConfig:
        return next(link for link in self.links if link.name == name)


# ---------------------------------------------------------------- loading


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return resolve_trace_files(tomllib.load(fh), path.parent)
    except FileNotFoundError as exc:
        raise ConfigError(str(path), "no such experiment file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"not valid TOML: {exc}") from exc


def load_default_raw() -> dict[str, Any]:
    return read_toml(DEFAULT_EXPERIMENT)


def as_name_long(path: str, value: object) -> str:
    return as_name(path, value, max_len=40)


def _sample_links(e: Table, links: tuple[LinkConfig, ...]) -> tuple[str, ...]:
    names = tuple(link.name for link in links)
    default = [link.name for link in links if link.forward.qdisc or link.reverse.qdisc]

    def conv(path: str, value: object) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise ConfigError(path, f"expected a list of link names, got {value!r}")
        return tuple(one_of(names)(f"{path}[{i}]", v) for i, v in enumerate(value))

    return e.get("sample_links", conv, tuple(default))


def _qdelay_links(e: Table, links: tuple[LinkConfig, ...], spec: topo.TopologySpec) -> tuple[str, ...]:
    """Links whose forward egress (router a -> b, with a qdisc) gets its queue delay measured from captures."""
    by_name = {link.name: link for link in links}

    def one(path: str, value: object) -> str:
        name = one_of(tuple(by_name))(path, value)
        link = by_name[name]
        if spec.nodes[link.a] != "router":
            raise ConfigError(path, f"link {name!r} starts at {link.a}, a {spec.nodes[link.a]}: the delay is "
                                    "measured through a router (its forward egress a -> b)")
        if link.forward.qdisc is None:
            raise ConfigError(path, f"link {name!r} has no qdisc on its forward egress ({link.a} -> {link.b})")
        return name

    def conv(path: str, value: object) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise ConfigError(path, f"expected a list of link names, got {value!r}")
        names = tuple(one(f"{path}[{i}]", v) for i, v in enumerate(value))
        if len(set(names)) != len(names):
            raise ConfigError(path, "lists a link twice")
        return names

    return e.get("qdelay_links", conv, ())


def _wire_links(e: Table, links: tuple[LinkConfig, ...]) -> tuple[str, ...]:
    """Links whose bytes on the wire are counted in both directions from captures on their a end."""
    names = tuple(link.name for link in links)

    def conv(path: str, value: object) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise ConfigError(path, f"expected a list of link names, got {value!r}")
        chosen = tuple(one_of(names)(f"{path}[{i}]", v) for i, v in enumerate(value))
        if len(set(chosen)) != len(chosen):
            raise ConfigError(path, "lists a link twice")
        return chosen

    return e.get("wire_links", conv, ())


# ---------------------------------------------------------------- firewalls


def _parse_firewalls(t: Table, spec: topo.TopologySpec) -> tuple[FirewallConfig, ...]:
    t.mark(*t.data)
    return tuple(_parse_firewall(Table(join(t.path, name), value), name, spec) for name, value in t.data.items())


def _parse_firewall(t: Table, name: str, spec: topo.TopologySpec) -> FirewallConfig:
    as_name(t.path, name, max_len=20)
    routers = tuple(n for n, role in spec.nodes.items() if role == "router")
    if not routers:
        raise ConfigError(join(t.path, "router"), f"topology {spec.name!r} has no router to put a firewall on")
    action = t.get("action", one_of(FIREWALL_ACTIONS), "limit")
    rate = t.get("rate", _firewall_rate, None)
    if action in ("limit", "shape") and rate is None:
        raise ConfigError(join(t.path, "rate"), f"missing: action = {action!r} needs a rate, e.g. rate = '64kbit' "
                                                "(or action = 'drop' to block)")
    burst = t.get("burst", parse_size, 0)
    if burst and action != "limit":
        raise ConfigError(join(t.path, "burst"), f"applies to action = 'limit' only, not {action!r}: remove it")
    queue = t.get("queue", _firewall_queue, 10)
    if t.has("queue") and action != "shape":
        raise ConfigError(join(t.path, "queue"), f"applies to action = 'shape' only, not {action!r}: remove it")
    fw = FirewallConfig(
        name=name, router=t.get("router", one_of(routers)), port=t.get("port", _port), action=action,
        proto=t.get("proto", one_of(FIREWALL_PROTOCOLS), "udp"),
        direction=t.get("direction", one_of(FIREWALL_DIRECTIONS), "both"), rate_bps=rate, burst_bytes=burst,
        queue_pkts=queue)
    t.done()
    return fw


def _port(path: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ConfigError(path, f"expected a port number 1-65535, got {value!r}")
    return value


def _firewall_queue(path: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= FIREWALL_QUEUE_MAX:
        raise ConfigError(path, f"expected 1-{FIREWALL_QUEUE_MAX} packets (the shaper's FIFO), got {value!r}")
    return value


def _firewall_rate(path: str, value: object) -> int:
    bps = parse_rate(path, value)
    if bps < 8:
        raise ConfigError(path, f"{value!r} is below 1 byte/s (nftables limits bytes per second): use >= 8bit")
    return bps


# ---------------------------------------------------------------- links


def _parse_links(t: Table, spec: topo.TopologySpec) -> tuple[LinkConfig, ...]:
    for key in t.data:
        if key not in {link.name for link in spec.links}:
            raise ConfigError(join(t.path, key), f"no link {key!r} in topology {spec.name!r}; links: "
                                                 f"{', '.join(link.name for link in spec.links)}")
    t.mark(*t.data)
    return tuple(_parse_link(link, t.data.get(link.name, {}), join(t.path, link.name)) for link in spec.links)


def _merge_link(defaults: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(defaults)
    for key, value in override.items():
        if key in ("forward", "reverse") and isinstance(value, dict):
            merged[key] = _merge_link(merged.get(key, {}), value)
        elif key == "qdisc" and isinstance(value, dict) and "kind" not in value and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = copy.deepcopy(value)
    return _rate_or_trace(merged, override)


def _rate_or_trace(merged: dict[str, Any], upper: dict[str, Any]) -> dict[str, Any]:
    """A ``trace`` set at a more specific level replaces a ``rate`` from a less specific one, and vice versa."""
    if "trace" in upper and "rate" not in upper:
        merged.pop("rate", None)
    if "rate" in upper and "trace" not in upper:
        merged.pop("trace", None)
    return merged


EGRESS_KEYS = ("rate", "delay", "jitter", "loss", "qdisc", "trace", "trace_step")


def _parse_link(spec: topo.LinkSpec, override: object, path: str) -> LinkConfig:
    if not isinstance(override, dict):
        raise ConfigError(path, f"expected a table, got {override!r}")
    data = _merge_link(spec.defaults, override)
    t = Table(path, data)
    base = {k: data[k] for k in EGRESS_KEYS if k in data}
    _parse_egress(Table(path, base), spec.name)  # errors in shared keys name the shared path
    directions = {}
    for direction in ("forward", "reverse"):
        own = t.table(direction)
        merged = _rate_or_trace({**base, **own.data}, dict(own.data))
        directions[direction] = _parse_egress(Table(own.path, merged), spec.name)
    offloads = t.get("offloads", as_bool, False)
    through_router = t.get("through_router", as_bool, False)
    t.mark(*EGRESS_KEYS)
    t.done()
    return LinkConfig(name=spec.name, a=spec.a, b=spec.b, offloads=offloads, through_router=through_router,
                      **directions)


def _parse_egress(t: Table, link: str) -> EgressConfig:
    if t.has("rate") and t.has("trace"):
        raise ConfigError(join(t.path, "trace"), "give either rate or trace (a trace sets the rate), not both")
    trace = t.get("trace", parse_trace, None)
    step = t.get("trace_step", _trace_step, traces.DEFAULT_STEP_S)
    if trace is None and t.has("trace_step"):
        raise ConfigError(join(t.path, "trace_step"), "trace_step without a trace: add trace = ... or remove it")
    egress = EgressConfig(
        rate_bps=t.get("rate", parse_rate, None) if trace is None else _first_rate(trace, step),
        delay_s=t.get("delay", parse_time, 0.0),
        jitter_s=t.get("jitter", parse_time, 0.0),
        loss_pct=t.get("loss", parse_percent, 0.0),
        qdisc=t.get("qdisc", parse_qdisc, None),
        trace=trace,
        trace_step_s=step,
    )
    t.done()
    if egress.rate_bps is not None and egress.qdisc is None:
        # an explicit leaf: HTB's implicit default leaf is an invisible pfifo
        egress = EgressConfig(**{**egress.__dict__, "qdisc": QdiscConfig(kind="pfifo", params=(("limit", DEFAULT_FIFO_LIMIT),))})
    return egress


# ---------------------------------------------------------------- link traces (nest_experiments.config.traces)

TRACE_KEYS = ("file", "generator", "schedule")


def parse_trace(path: str, value: object) -> traces.Trace:
    """``trace = "file"`` (Mahimahi, or a .csv schedule), ``[[t, rate], ...]``, or a table (``generator = ...``)."""
    if isinstance(value, str):
        return _trace_file(path, value)
    if isinstance(value, list):
        return traces.parse_schedule_list(value, path=path)
    t = Table(path, value)
    given = [k for k in TRACE_KEYS if t.has(k)]
    if len(given) != 1:
        raise ConfigError(path, f"expected exactly one of {', '.join(TRACE_KEYS)}, e.g. {{ generator = \"dvl\", seed = 1 }}")
    if given == ["generator"]:
        trace = traces.generate(t.get("generator", as_str), seed=t.get("seed", as_int, 1), path=join(path, "generator"))
    elif t.has("seed"):
        raise ConfigError(join(path, "seed"), "only a generator takes a seed")
    elif given == ["file"]:
        trace = t.get("file", _trace_file)
    else:
        trace = t.get("schedule", lambda p, v: traces.parse_schedule_list(v if isinstance(v, list) else [v], path=p))
    trace = trace.scaled(time_scale=t.get("time_scale", _scale, 1.0), rate_scale=t.get("rate_scale", _scale, 1.0))
    t.done()
    return trace


def _trace_file(path: str, value: object) -> traces.Trace:
    name = as_str(path, value)
    file = Path(name) if Path(name).is_absolute() else resources.data_root() / name
    if not file.is_file():
        raise ConfigError(path, f"no such trace file {name!r} (a relative path is looked up next to the experiment "
                                f"file, then in {resources.data_root()})")
    try:
        return _read_trace_file(str(file), file.stat().st_mtime_ns)
    except ConfigError as exc:
        raise ConfigError(path, str(exc)) from None


@cache
def _read_trace_file(name: str, _mtime_ns: int) -> traces.Trace:
    return traces.read_file(Path(name))


def _scale(path: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1000:
        raise ConfigError(path, f"expected a factor in (0, 1000], got {value!r}")
    return float(value)


def _trace_step(path: str, value: object) -> float:
    step = parse_time(path, value)
    if not 0.01 <= step <= 60:
        raise ConfigError(path, f"expected 10ms..60s, got {value!r}")
    return step


def _first_rate(trace: traces.Trace, step_s: float) -> int:
    return traces.htb_steps(trace.steps(step_s, step_s), step_s)[0][1]


def resolve_trace_files(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    """Trace files named relative to the experiment file (``base``) become absolute paths, in place."""

    def fix(value: Any) -> Any:
        if isinstance(value, str) and not Path(value).is_absolute() and (base / value).is_file():
            return str((base / value).resolve())
        if isinstance(value, dict) and "file" in value:
            return {**value, "file": fix(value["file"])}
        return value

    for link in (raw.get("links") or {}).values():
        for level in (link, *(link.get(d) for d in ("forward", "reverse"))) if isinstance(link, dict) else ():
            if isinstance(level, dict) and "trace" in level:
                level["trace"] = fix(level["trace"])
    for app in (raw.get("apps") or {}).values():  # a dash app's video file
        if isinstance(app, dict) and "source" in app:
            app["source"] = fix(app["source"])
    for table in ("sweep", "paper"):
        for key, value in (raw.get(table) or {}).items():
            if any(k.strip().endswith(".trace") for k in key.split(",")):
                raw[table][key] = [fix(v) for v in value] if isinstance(value, list) and table == "sweep" else fix(value)
    return raw


_PARAM_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "time": lambda p, v: parse_time(p, v, allow_zero=False),
    "int": positive_int,
    "size": parse_size,
    "bool": as_bool,
}


def parse_qdisc(path: str, value: object) -> QdiscConfig:
    if isinstance(value, str):
        value = {"kind": value}
    t = Table(path, value)
    kind = t.get("kind", one_of(tuple(qdisc_kinds())))
    spec = qdisc_kinds()[kind].params
    params = tuple((key, t.get(key, one_of(spec[key].choices) if spec[key].type == "choice" else
                               _PARAM_PARSERS[spec[key].type])) for key in t.data if key in spec)
    t.mark(*spec)
    try:
        t.done()
    except ConfigError as exc:
        raise ConfigError(exc.path, f"{str(exc).split(': ', 1)[1]} (parameters of {kind})") from None
    return QdiscConfig(kind=kind, params=params)


# ---------------------------------------------------------------- apps

def node_of(spec: topo.TopologySpec) -> Callable[[str, object], str]:
    return one_of(tuple(spec.nodes))


def start_time(t: Table, duration: float) -> float:
    start = t.get("start", parse_time, 0.0)
    if start >= duration:
        raise ConfigError(join(t.path, "start"), f"starts at {start:g} s, after the run ends ({duration:g} s)")
    return start


def two_nodes(t: Table, spec: topo.TopologySpec, first: str, second: str) -> tuple[str, str]:
    """Read an app's two endpoints (e.g. src/dst), which must be different nodes of the topology."""
    node = node_of(spec)
    a, b = t.get(first, node), t.get(second, node)
    if a == b:
        raise ConfigError(join(t.path, second), f"{first} and {second} must be different nodes")
    return a, b



def time_in(limit: toollimits.Limit) -> Callable[[str, object], float]:
    """A time (``"100ms"``) within ``limit``, in seconds."""
    return lambda path, value: limit.check(path, parse_time(path, value))


