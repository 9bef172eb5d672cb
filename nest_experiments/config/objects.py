"""App kind ``objects``: object-download sessions (:mod:`nest_experiments.apps.objects_client`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nest_experiments.config import topology as topo
from nest_experiments.config.core import (
    AppConfig,
    start_time,
    two_nodes,
)
from nest_experiments.config.dash import DASH_H3_CLIENTS, DASH_HTTP_SERVERS
from nest_experiments.config.tomlread import Table, as_int, join, one_of, positive_int
from nest_experiments.errors import ConfigError
from nest_experiments.units import parse_size, parse_time

# ---------------------------------------------------------------- objects (object-download sessions)

OBJECT_MODES = ("sequential", "parallel")  # apps.objects_client.MODES
OBJECT_TRANSPORTS = ("tcp", "h2", "h3")  # what both origins serve (Caddy has no MPTCP listener)


@dataclass(frozen=True, kw_only=True)
class ObjectsApp(AppConfig):
    """Object-download sessions (:mod:`nest_experiments.apps.objects_client`): an origin on ``server`` serving generated
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


def parse_objects(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> ObjectsApp:
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
