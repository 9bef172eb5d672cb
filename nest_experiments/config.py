"""Experiment files: TOML in, frozen, validated dataclasses out.

Everything is checked here, before any namespace exists; every error names
the key path (``links.bottleneck.qdisc.taget: unknown key (did you mean
'target'?)``). An experiment file looks like::

    [experiment]
    name = "dumbbell_pie"
    topology = "dumbbell"          # topologies/dumbbell.toml
    duration = "20s"
    repetitions = 2

    [links.bottleneck]             # settings for both directions ...
    rate = "10mbit"
    qdisc = { kind = "pie", target = "5ms" }
    [links.bottleneck.reverse]     # ... and per direction (forward = a -> b)
    delay = "20ms"
    qdisc = { kind = "pfifo" }

    [apps.bulk]
    kind = "iperf3"
    src = "h1"
    dst = "s1"
    flows = 5

    [firewalls.udp443]             # a rule on a router's forward path (nftables)
    router = "r1"
    proto = "udp"
    port = 443                     # the server's port: packets to it and from it
    rate = "64kbit"                # action = "limit" (default, a policer); "shape" (a queue); "drop" / "accept"

    [sweep]                        # cartesian product, in this order
    "links.bottleneck.qdisc.kind" = ["pie", "fq_pie"]
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from nest_experiments import PROJECT_ROOT, toollimits, traces
from nest_experiments import topology as topo
from nest_experiments.errors import ConfigError
from nest_experiments.tomlread import Table, as_bool, as_int, as_name, as_str, join, one_of, positive_int
from nest_experiments.units import format_rate, parse_percent, parse_rate, parse_size, parse_time

QDISC_FILE = PROJECT_ROOT / "qdisc" / "kinds.toml"
DEFAULT_EXPERIMENT = Path(__file__).parent / "default.toml"
RUNTIMES = ("auto", "host", "vm")
CONGESTION_CONTROLS = ("cubic", "reno", "bbr", "htcp", "vegas", "dctcp")
DEFAULT_FIFO_LIMIT = 1000


@cache
def qdisc_kinds() -> dict[str, dict[str, Any]]:
    with QDISC_FILE.open("rb") as fh:
        return tomllib.load(fh)


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
    trace: traces.Trace | None = None  # the rate follows this trace (nest_experiments.traceplay)
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

    def egresses(self) -> list[tuple[str, str, EgressConfig]]:
        """(node, peer, egress) for both directions."""
        return [(self.a, self.b, self.forward), (self.b, self.a, self.reverse)]


@dataclass(frozen=True, kw_only=True)
class AppConfig:
    name: str
    kind: str
    start_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Iperf3App(AppConfig):
    """``flows`` parallel iperf3 TCP flows from ``src`` to ``dst``."""

    src: str
    dst: str
    flows: int = 1
    duration_s: float | None = None  # None: until the run ends
    congestion_control: str | None = None  # None: the experiment's
    port: int = 5201
    interval_s: float = 1.0


DASH_TRANSPORTS = ("tcp", "mptcp", "h2", "h3", "race")  # race: QUIC/TCP connection racing (alt-svc from Caddy)
MPTCP_ENDPOINT_MODES = ("fullmesh", "subflow")
DASH_HTTP_SERVERS = ("nest", "caddy")  # our asyncio server (aioquic for h3), Caddy (quic-go)
CADDY_TRANSPORTS = ("tcp", "h2", "h3", "race")  # Caddy 2.6 has no MPTCP listener
MEDIA_KINDS = ("generated", "encoded")  # dash.media (sizes only) or dash.encode (decodable, ffmpeg)
DASH_H3_CLIENTS = ("qh3", "aioquic", "quic-go")  # the player's QUIC stack (dash.transports.H3_CLIENTS); the first: default


@dataclass(frozen=True, kw_only=True)
class DashApp(AppConfig):
    """A DASH session: our server on ``server``, our player on ``client``, over ``transport``."""

    server: str
    client: str
    transport: str = "tcp"
    ladder: str = "eldorado_av1"
    clip_s: float | None = None  # None: the ladder's whole duration
    abr: str = "grate"
    abr_audio: str = "grate"
    level: int = 0  # abr = "fixed": the video level (0-based index into the ladder)
    max_buffer_s: float = 10.0
    threshold_s: float = 1.0
    vbr: float = 0.0
    mptcp_endpoints: str = "fullmesh"
    mptcp_subflows: int = 2
    # net.mptcp.add_addr_timeout on both ends; None: the kernel's (120 s; before Linux 6.18 a fixed timer)
    mptcp_add_addr_timeout_s: int | None = None
    http_server: str = "nest"  # the origin's software: "nest" (dash/server.py) or "caddy"
    h3_client: str = DASH_H3_CLIENTS[0]  # the player's QUIC stack over h3
    player: str = "nest"  # dash.players.PLAYERS: ours, dash.js in headless Chromium, GPAC
    media: str = "generated"  # "generated" (sizes only, dash.media) or "encoded" (decodable, dash.encode)
    codec: str = "h264"  # encoded media: dash.encode.CODECS
    source: str | None = None  # encoded media: a video file (None: a test pattern and a tone)
    racing: str = "chromium"  # transport "race", our player: the policy (dash.racing.POLICIES)
    racing_params: tuple[tuple[str, float], ...] = ()  # (dash.racing.RacingParams field, value) set in the file

    @property
    def kernel_features(self) -> tuple[str, ...]:
        return ("mptcp",) if self.transport == "mptcp" else ()


FIREWALL_PROTOCOLS = ("udp", "tcp")
FIREWALL_ACTIONS = ("limit", "shape", "drop", "accept")  # accept: count only (a control condition with the same counters)
FIREWALL_DIRECTIONS = ("both", "to_port", "from_port")
FIREWALL_QUEUE_MAX = 10_000  # packets


@dataclass(frozen=True, kw_only=True)
class FirewallConfig:
    """``[firewalls.NAME]``: packets of ``proto`` to and/or from ``port`` crossing ``router`` are rate-limited
    (policed or shaped), dropped or only counted (nftables, :mod:`nest_experiments.nftplan`; the shaper:
    :mod:`nest_experiments.fwshape`).

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
    wire_links: tuple[str, ...] = ()  # bytes on the wire, both directions, from captures (collectors/wire.py)
    firewalls: tuple[FirewallConfig, ...] = ()
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


def parse_experiment(raw: dict[str, Any]) -> Experiment:
    """Validate one resolved experiment (sweep already applied)."""
    top = Table("", raw)
    top.mark("sweep", "paper", "experiment", "links", "apps", "firewalls")  # sweep, paper: applied by nest_experiments.sweep
    top.done()  # an unknown top-level table first: it may be a misspelt [experiment]
    e = top.table("experiment")
    name = e.get("name", as_name_long)
    topology = topo.load("experiment.topology", e.get("topology", as_str, "dumbbell"))
    duration = e.get("duration", lambda p, v: parse_time(p, v, allow_zero=False))
    links = _parse_links(top.table("links"), topology)
    apps = _parse_apps(top.table("apps"), topology, duration)
    exp = Experiment(
        name=name,
        description=e.get("description", as_str, ""),
        topology=topology,
        duration_s=duration,
        repetitions=e.get("repetitions", positive_int, 1),
        seed=e.get("seed", as_int, 1),
        congestion_control=e.get("tcp_congestion_control", one_of(CONGESTION_CONTROLS), "cubic"),
        runtime=e.get("runtime", one_of(RUNTIMES), "auto"),
        sample_interval_s=e.get("sample_interval", lambda p, v: parse_time(p, v, allow_zero=False), 0.1),
        sample_links=_sample_links(e, links),
        qdelay_links=_qdelay_links(e, links, topology),
        keep_captures=e.get("keep_captures", as_bool, False),
        wire_links=_wire_links(e, links),
        links=links,
        apps=apps,
        firewalls=_parse_firewalls(top.table("firewalls"), topology),
        raw=copy.deepcopy(raw),
    )
    e.done()
    top.done()
    return exp


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
    t.mark(*EGRESS_KEYS)
    t.done()
    return LinkConfig(name=spec.name, a=spec.a, b=spec.b, offloads=offloads, **directions)


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


# ---------------------------------------------------------------- link traces (nest_experiments.traces)

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
    file = Path(name) if Path(name).is_absolute() else PROJECT_ROOT / name
    if not file.is_file():
        raise ConfigError(path, f"no such trace file {name!r} (a relative path is looked up next to the experiment "
                                f"file, then in {PROJECT_ROOT})")
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
    spec = qdisc_kinds()[kind]["params"]
    params = tuple((key, t.get(key, _PARAM_PARSERS[spec[key]["type"]])) for key in t.data if key in spec)
    t.mark(*spec)
    try:
        t.done()
    except ConfigError as exc:
        raise ConfigError(exc.path, f"{str(exc).split(': ', 1)[1]} (parameters of {kind})") from None
    return QdiscConfig(kind=kind, params=params)


# ---------------------------------------------------------------- apps

AppParser = Callable[[Table, str, topo.TopologySpec, float], AppConfig]
APP_KINDS: dict[str, AppParser] = {}


def register_app_kind(kind: str) -> Callable[[AppParser], AppParser]:
    def deco(fn: AppParser) -> AppParser:
        APP_KINDS[kind] = fn
        return fn

    return deco


def _parse_apps(t: Table, spec: topo.TopologySpec, duration: float) -> tuple[AppConfig, ...]:
    apps = []
    for name in t.data:
        a = t.table(name)
        as_name(a.path, name, max_len=20)
        kind = a.get("kind", one_of(tuple(APP_KINDS)))
        app = APP_KINDS[kind](a, name, spec, duration)
        a.done()
        apps.append(app)
    return tuple(apps)


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


@register_app_kind("iperf3")
def _parse_iperf3(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> Iperf3App:
    limits = toollimits.IPERF3
    src, dst = two_nodes(t, spec, "src", "dst")
    start = start_time(t, duration)
    length = t.get("duration", lambda p, v: parse_time(p, v, allow_zero=False), None)
    if length is not None and start + length > duration:
        raise ConfigError(join(t.path, "duration"), f"start + duration ({start + length:g} s) exceeds the run ({duration:g} s)")
    # iperf3 -t gets the app's duration, or the rest of the run after its start
    limits["duration"].check(join(t.path, "duration" if length is not None else "start"),
                             length if length is not None else duration - start)
    return Iperf3App(
        name=name, kind="iperf3", src=src, dst=dst, start_s=start, duration_s=length,
        flows=t.get("flows", toollimits.integer(limits["flows"]), 1),
        congestion_control=t.get("tcp_congestion_control", one_of(CONGESTION_CONTROLS), None),
        port=t.get("port", toollimits.integer(limits["port"]), 5201),
        interval_s=t.get("interval", _time_in(limits["interval"]), 1.0),
    )


def _time_in(limit: toollimits.Limit) -> Callable[[str, object], float]:
    """A time (``"100ms"``) within ``limit``, in seconds."""
    return lambda path, value: limit.check(path, parse_time(path, value))


@register_app_kind("dash")
def _parse_dash(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> DashApp:
    from nest_experiments.dash import abr, media, players  # pure modules; loaded only when a dash app is used

    server, client = two_nodes(t, spec, "server", "client")
    ladder = t.get("ladder", one_of(tuple(media.available_ladders())), "eldorado_av1")
    clip = t.get("clip", lambda p, v: parse_time(p, v, allow_zero=False), None)
    length = media.load_ladder(ladder).duration_s
    if clip is not None and clip > length:
        raise ConfigError(join(t.path, "clip"), f"{clip:g} s is longer than ladder {ladder!r} ({length:g} s)")
    player_name = t.get("player", one_of(players.PLAYERS), "nest")
    algorithms = one_of(players.abr_names(player_name, tuple(abr.available_abrs())))
    video_abr = t.get("abr", algorithms, players.default_abr(player_name))
    max_buffer = t.get("max_buffer", lambda p, v: parse_time(p, v, allow_zero=False), 10.0)
    threshold = t.get("threshold", lambda p, v: parse_time(p, v, allow_zero=False), 1.0)
    if threshold > max_buffer:
        raise ConfigError(join(t.path, "threshold"), f"{threshold:g} s exceeds max_buffer ({max_buffer:g} s)")

    def add_addr_timeout(path: str, value: object) -> int:
        return int(toollimits.DASH["mptcp_add_addr_timeout"].check(path, parse_time(path, value, allow_zero=False)))

    def vbr(path: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 2:
            raise ConfigError(path, f"expected a log-normal sigma in [0, 2), got {value!r}")
        return float(value)

    transport = t.get("transport", one_of(DASH_TRANSPORTS), "tcp")
    player, media_kind, codec, source = _dash_player_and_media(t, transport, video_abr)
    http_server = t.get("http_server", one_of(DASH_HTTP_SERVERS), "nest")
    if http_server == "caddy" and transport not in CADDY_TRANSPORTS:
        raise ConfigError(join(t.path, "http_server"), f"Caddy serves transports {', '.join(CADDY_TRANSPORTS)}, "
                                                       f"not {transport!r}: use http_server = 'nest' for it")
    if player == "dashjs" and transport == "race" and http_server != "caddy":
        raise ConfigError(join(t.path, "http_server"), "dash.js over race needs http_server = 'caddy' (its alt-svc "
                                                       "header is how Chromium discovers QUIC)")
    return DashApp(
        name=name, kind="dash", server=server, client=client, start_s=start_time(t, duration),
        transport=transport, http_server=http_server, h3_client=t.get("h3_client", one_of(DASH_H3_CLIENTS), "qh3"),
        player=player, media=media_kind, codec=codec, source=source,
        ladder=ladder, clip_s=clip, abr=video_abr, abr_audio=_abr_audio(t, player, algorithms, video_abr),
        level=_fixed_level(t, video_abr, media.load_ladder(ladder)),
        max_buffer_s=max_buffer, threshold_s=threshold, vbr=t.get("vbr", vbr, 0.0),
        mptcp_endpoints=t.get("mptcp_endpoints", one_of(MPTCP_ENDPOINT_MODES), "fullmesh"),
        mptcp_subflows=t.get("mptcp_subflows", toollimits.integer(toollimits.DASH["mptcp_subflows"]), 2),
        mptcp_add_addr_timeout_s=t.get("mptcp_add_addr_timeout", add_addr_timeout, None),
        **_racing(t, transport, player),
    )


def _racing(t: Table, transport: str, player: str) -> dict[str, Any]:
    """``racing`` and ``racing_params`` of a dash app: our player over ``race`` only.

    ``racing_params`` keys are :class:`nest_experiments.dash.racing.RacingParams` fields; a time
    (``idle_timeout = "29s"``) drops the field's ``_s``, counts and ratios are numbers.
    """
    from nest_experiments.dash import racing

    for key in ("racing", "racing_params"):
        if t.has(key) and (transport != "race" or player != "nest"):
            raise ConfigError(join(t.path, key), "applies to our player (player = 'nest') over transport = 'race' "
                                                 "only: remove it or set transport = 'race'")
    if transport == "race" and player == "nest" and t.data.get("h3_client") == "quic-go":
        raise ConfigError(join(t.path, "h3_client"), "the race transport runs QUIC in the player's process: "
                                                     "h3_client = 'qh3' or 'aioquic', not 'quic-go'")
    policy = t.get("racing", one_of(racing.POLICIES), "chromium")
    p = t.table("racing_params")
    values: dict[str, float] = {}
    for name in racing.PARAM_NAMES:
        if name in racing.INT_PARAMS:
            values[name] = p.get(name, positive_int, None)
        elif name.endswith("_s"):
            values[name] = p.get(name[:-2], parse_time, None)
        else:
            values[name] = p.get(name, _positive_number, None)
    p.done()
    chosen = {k: v for k, v in values.items() if v is not None}
    try:
        racing.params_from(chosen)
    except ValueError as exc:
        key, _, why = str(exc).partition(": ")
        raise ConfigError(join(p.path, key.removesuffix("_s")), why) from None
    return {"racing": policy, "racing_params": tuple(sorted(chosen.items()))}


def _positive_number(path: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(path, f"expected a number > 0, got {value!r}")
    return float(value)


def _dash_player_and_media(t: Table, transport: str, video_abr: str) -> tuple[str, str, str, str | None]:
    """``player``, ``media``, ``codec``, ``source`` of a dash app; a player missing here is refused now."""
    from nest_experiments.dash import encode, players

    player = t.get("player", one_of(players.PLAYERS), "nest")
    if transport not in players.TRANSPORTS[player]:
        raise ConfigError(join(t.path, "transport"), f"player {player!r} plays over "
                                                     f"{', '.join(players.TRANSPORTS[player])}, not {transport!r}")
    decodes = player in players.DECODING
    kind = t.get("media", one_of(MEDIA_KINDS), "encoded" if decodes else "generated")
    if decodes and kind != "encoded":
        raise ConfigError(join(t.path, "media"), f"player {player!r} decodes: it needs media = 'encoded'")
    if kind == "generated":
        for key in ("codec", "source"):
            if t.has(key):
                raise ConfigError(join(t.path, key), "applies to media = 'encoded' only")
    elif t.has("vbr"):
        raise ConfigError(join(t.path, "vbr"), "applies to media = 'generated' only (encodes are CBR)")
    codec = t.get("codec", one_of(encode.CODECS), encode.DEFAULT_CODEC)
    source = t.get("source", as_str, None)
    if source is not None and not Path(source).is_file():
        raise ConfigError(join(t.path, "source"), f"{source}: no such video file (a path relative to the "
                                                  "experiment file, or absolute)")
    if player == "gpac" and t.get("threshold", lambda p, v: parse_time(p, v, allow_zero=False), 1.0) >= \
            t.get("max_buffer", lambda p, v: parse_time(p, v, allow_zero=False), 10.0):
        raise ConfigError(join(t.path, "threshold"), "GPAC rebuffers only with a threshold below max_buffer")
    why = players.missing(player, transport)
    if why is not None:
        raise ConfigError(join(t.path, "player"), why)
    return player, kind, codec, source


def _fixed_level(t: Table, video_abr: str, ladder: Any) -> int:
    """``level`` of ``abr = "fixed"``: an index into the video ladder, or one of its bitrates (``"1600kbit"``,
    so that one sweep axis can set the level and a link's rate together)."""
    rates = [lv.bitrate_bps for lv in ladder.video.levels]
    listed = ", ".join(format_rate(r) for r in rates)

    def conv(path: str, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(rates):
                raise ConfigError(path, f"level {value} is not in ladder {ladder.name!r}: 0..{len(rates) - 1}")
            return value
        bps = parse_rate(path, value)
        if bps not in rates:
            raise ConfigError(path, f"{value!r} is not a video bitrate of ladder {ladder.name!r} ({listed}): "
                                    "give one of them or a level index")
        return rates.index(bps)

    if video_abr != "fixed":
        if t.has("level"):
            raise ConfigError(join(t.path, "level"), "applies to abr = 'fixed' only")
        return 0
    return t.get("level", conv, 0)


def _abr_audio(t: Table, player: str, algorithms: Callable[[str, object], str], video_abr: str) -> str:
    if player != "nest" and t.has("abr_audio"):
        raise ConfigError(join(t.path, "abr_audio"), f"player {player!r} adapts audio with its own rules: "
                                                     "remove abr_audio")
    return t.get("abr_audio", algorithms, video_abr)


# ---------------------------------------------------------------- sipp, httperf (background traffic)


@dataclass(frozen=True, kw_only=True)
class SippApp(AppConfig):
    """SIPp VoIP calls from ``src`` (uac) to ``dst`` (uas echoing the RTP back).

    ``rate`` calls start per second, each plays ``call_length`` of G.711
    A-law RTP (20 ms packets, ~80 kbit/s at the IP layer each way) and then
    hangs up. The default 2 s keeps ~rate x 2 = 20 calls up at 10 calls/s,
    ~1.6-1.8 Mbit/s each way: VoIP alone does not fill a 10 Mbit/s
    bottleneck (iperf3 does), and the VM's emulated CPU keeps up. SIPp's own
    ``uac_pcap`` (8 s of audio per call) would be ~80 calls, ~6-7 Mbit/s.

    SIPp's event loop waits at most 1 ms for a packet (fixed in its code), so
    each SIPp wakes ~1000 times a second even when idle: ~0.15 vCPU in the TCG
    guest. ``timer_slack`` (default 2 ms) lets the kernel end those waits up
    to that much late, which merges the wakeups; a packet still wakes SIPp at
    once, but SIPp's timers (call starts, pauses, RTP send times) may fire up
    to ``timer_slack`` late. ``timer_slack = "0ms"`` keeps the kernel's 50 us.
    """

    src: str
    dst: str
    rate: float = 10.0  # calls per second
    call_length_s: float = 2.0
    duration_s: float | None = None  # calls are started during this time; None: until the run ends
    port: int = 5060  # SIP (UDP) on both ends
    media_port: int = 6000  # RTP: the server echoes on it, the client sends from it
    timer_slack_s: float = 0.002


@dataclass(frozen=True, kw_only=True)
class HttperfApp(AppConfig):
    """httperf GETs from ``src`` to a file server on ``dst``: ``rate`` new connections per second.

    ``server`` is ``nginx`` (default: one event-driven process that sleeps
    between requests) or ``caddy`` (Go: its runtime's timers cost ~0.3 vCPU
    in the TCG guest even at 15 requests/s).

    The file is ``size`` bytes (default 10 KB, one web object: 15/s is ~1.2
    Mbit/s, sporadic short flows beside the bulk iperf3 ones; 100 KB at 15/s
    would be ~12 Mbit/s, more than a 10 Mbit/s bottleneck by itself).
    Debian's httperf busy-polls a whole core: it runs with
    :mod:`nest_experiments.apps.selectwait` preloaded (it then sleeps between
    events) and in a cgroup capped at ``cpu_limit`` of one CPU (default 20%;
    at 15/s it needs ~1% on the host, ~12% in the VM runtime's TCG guest).
    """

    src: str
    dst: str
    rate: float = 15.0  # connections (one GET each) per second
    duration_s: float | None = None  # None: until the run ends
    size: int = 10 * 1024
    port: int = 8080
    timeout_s: float = 5.0
    cpu_limit: float = 0.2  # fraction of one CPU for the httperf client
    server: str = "nginx"  # one of WEB_SERVERS


def _traffic_length(t: Table, start: float, duration: float) -> float | None:
    length = t.get("duration", lambda p, v: parse_time(p, v, allow_zero=False), None)
    if length is not None and start + length > duration:
        raise ConfigError(join(t.path, "duration"), f"start + duration ({start + length:g} s) exceeds the run ({duration:g} s)")
    return length


@register_app_kind("sipp")
def _parse_sipp(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> SippApp:
    limits = toollimits.SIPP
    src, dst = two_nodes(t, spec, "src", "dst")
    start = start_time(t, duration)
    call_length = t.get("call_length", _time_in(limits["call_length"]), 2.0)
    port = t.get("port", toollimits.integer(limits["port"]), 5060)
    media_port = t.get("media_port", toollimits.integer(limits["media_port"]), 6000)
    if media_port in (port, port + 1) or port in (media_port + 2, media_port + 3):
        raise ConfigError(join(t.path, "media_port"), f"{media_port} collides with the SIP port {port} "
                                                      "(sipp uses media_port..media_port+3)")
    return SippApp(name=name, kind="sipp", src=src, dst=dst, start_s=start,
                   rate=t.get("rate", toollimits.number(limits["rate"]), 10.0), call_length_s=call_length,
                   duration_s=_traffic_length(t, start, duration), port=port, media_port=media_port,
                   timer_slack_s=t.get("timer_slack", _time_in(limits["timer_slack"]), 0.002))


WEB_SERVERS = ("nginx", "caddy")


@register_app_kind("httperf")
def _parse_httperf(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> HttperfApp:
    limits = toollimits.HTTPERF
    src, dst = two_nodes(t, spec, "src", "dst")
    start = start_time(t, duration)
    size = t.get("size", lambda p, v: int(limits["size"].check(p, parse_size(p, v))), 10 * 1024)
    cpu_limit = t.get("cpu_limit", lambda p, v: limits["cpu_limit"].check(p, parse_percent(p, v)), 20.0)
    rate = t.get("rate", toollimits.number(limits["rate"]), 15.0)
    timeout = t.get("timeout", lambda p, v: parse_time(p, v, allow_zero=False), 5.0)
    try:  # connections open at once while the server does not answer
        limits["open_connections"].check(join(t.path, "timeout"), rate * timeout)
    except ConfigError as exc:
        raise ConfigError(exc.path, f"rate x timeout ({rate:g}/s x {timeout:g} s) = {str(exc).split(': ', 1)[1]}") from None
    return HttperfApp(name=name, kind="httperf", src=src, dst=dst, start_s=start,
                      rate=rate, duration_s=_traffic_length(t, start, duration),
                      size=size, port=t.get("port", toollimits.integer(limits["port"]), 8080), timeout_s=timeout,
                      cpu_limit=cpu_limit / 100, server=t.get("server", one_of(WEB_SERVERS), "nginx"))


# ---------------------------------------------------------------- objects (object-download sessions)

OBJECT_MODES = ("sequential", "parallel")  # dash.objects.MODES
OBJECT_TRANSPORTS = ("tcp", "h2", "h3")  # what both origins serve (Caddy has no MPTCP listener)


@dataclass(frozen=True, kw_only=True)
class ObjectsApp(AppConfig):
    """Object-download sessions (:mod:`nest_experiments.dash.objects`): an origin on ``server`` serving generated
    object files, the download client on ``client``; one row per object in ``objects.csv``.

    ``sequential``: ``requests`` GETs one after another per session, ``pause`` between them; ``parallel``:
    ``streams`` concurrent request loops (one TCP connection each over ``tcp``, one QUIC connection for all
    over ``h3``). Sizes are drawn uniformly from ``sizes`` with ``seed``; ``pause`` is fixed or a
    ``[min, max]`` range drawn per request.
    """

    server: str
    client: str
    transport: str = "tcp"
    http_server: str = "caddy"  # "caddy" (quic-go) or "nest" (our server: aioquic)
    h3_client: str = DASH_H3_CLIENTS[0]
    mode: str = "sequential"
    requests: int = 40  # per stream and session
    size_min: int = 2 * 1024**2
    size_max: int = 50 * 1024**2
    pause_min_s: float = 0.5
    pause_max_s: float = 0.5
    streams: int = 1
    sessions: int = 1
    seed: int = 1


def _range_of(conv: Callable[[str, object], Any]) -> Callable[[str, object], tuple[Any, Any]]:
    """A value, or a two-item ``[min, max]`` list, each converted by ``conv``; min <= max."""

    def parse(path: str, value: object) -> tuple[Any, Any]:
        if not isinstance(value, list):
            one = conv(path, value)
            return one, one
        if len(value) != 2:
            raise ConfigError(path, f"expected one value or [min, max], got {value!r}")
        lo, hi = conv(path, value[0]), conv(path, value[1])
        if lo > hi:
            raise ConfigError(path, f"min {value[0]!r} is above max {value[1]!r}: write [min, max]")
        return lo, hi

    return parse


@register_app_kind("objects")
def _parse_objects(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> ObjectsApp:
    server, client = two_nodes(t, spec, "server", "client")
    mode = t.get("mode", one_of(OBJECT_MODES), "sequential")
    if mode == "sequential" and t.has("streams"):
        raise ConfigError(join(t.path, "streams"), "applies to mode = 'parallel' only (sequential has one stream)")
    streams = t.get("streams", lambda p, v: as_int(p, v, minimum=2), 2) if mode == "parallel" else 1
    size_min, size_max = t.get("sizes", _range_of(lambda p, v: parse_size(p, v) or _zero_size(p)), (2 << 20, 50 << 20))
    pause_min, pause_max = t.get("pause", _range_of(parse_time), (0.5, 0.5))
    transport = t.get("transport", one_of(OBJECT_TRANSPORTS), "tcp")
    app = ObjectsApp(
        name=name, kind="objects", server=server, client=client, start_s=start_time(t, duration),
        transport=transport, http_server=t.get("http_server", one_of(DASH_HTTP_SERVERS), "caddy"),
        h3_client=t.get("h3_client", one_of(DASH_H3_CLIENTS), DASH_H3_CLIENTS[0]), mode=mode,
        requests=t.get("requests", positive_int, 40), size_min=size_min, size_max=size_max,
        pause_min_s=pause_min, pause_max_s=pause_max, streams=streams,
        sessions=t.get("sessions", positive_int, 1), seed=t.get("seed", as_int, 1),
    )
    _objects_fit(app, join(t.path, "requests"), duration)
    return app


def _objects_fit(app: ObjectsApp, path: str, duration: float) -> None:
    """The design's pauses alone must fit in the run after the app's start (the downloads need more)."""
    pauses = app.sessions * (app.requests - 1) * app.pause_min_s + (app.sessions - 1) * app.pause_min_s
    if pauses >= duration - app.start_s:
        raise ConfigError(path, f"{app.sessions} session(s) x {app.requests} requests with pauses of at least "
                                f"{app.pause_min_s:g} s wait {pauses:g} s, more than the run's {duration - app.start_s:g} s "
                                "after the start: fewer requests, or a longer experiment.duration")


def _zero_size(path: str) -> int:
    raise ConfigError(path, "an object of 0 bytes: sizes must be at least 1b")
