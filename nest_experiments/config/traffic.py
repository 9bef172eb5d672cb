"""App kinds ``iperf3``, ``sipp`` and ``httperf``: bulk TCP flows and the background traffic (VoIP calls, web
requests), their limits checked against the tools' (:mod:`nest_experiments.config.toollimits`).
"""

from __future__ import annotations

from dataclasses import dataclass

from nest_experiments.config import toollimits
from nest_experiments.config import topology as topo
from nest_experiments.config.core import (
    CONGESTION_CONTROLS,
    AppConfig,
    start_time,
    time_in,
    two_nodes,
)
from nest_experiments.config.tomlread import Table, join, one_of
from nest_experiments.errors import ConfigError
from nest_experiments.units import parse_percent, parse_size, parse_time


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



def parse_iperf3(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> Iperf3App:
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
        interval_s=t.get("interval", time_in(limits["interval"]), 1.0),
    )




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
    duration_s: float | None = None  # calls are started during this time; None: calls that end by the run's end
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


def parse_sipp(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> SippApp:
    limits = toollimits.SIPP
    src, dst = two_nodes(t, spec, "src", "dst")
    start = start_time(t, duration)
    call_length = t.get("call_length", time_in(limits["call_length"]), 2.0)
    port = t.get("port", toollimits.integer(limits["port"]), 5060)
    media_port = t.get("media_port", toollimits.integer(limits["media_port"]), 6000)
    if media_port in (port, port + 1) or port in (media_port + 2, media_port + 3):
        raise ConfigError(join(t.path, "media_port"), f"{media_port} collides with the SIP port {port} "
                                                      "(sipp uses media_port..media_port+3)")
    return SippApp(name=name, kind="sipp", src=src, dst=dst, start_s=start,
                   rate=t.get("rate", toollimits.number(limits["rate"]), 10.0), call_length_s=call_length,
                   duration_s=_traffic_length(t, start, duration), port=port, media_port=media_port,
                   timer_slack_s=t.get("timer_slack", time_in(limits["timer_slack"]), 0.002))


WEB_SERVERS = ("nginx", "caddy")


def parse_httperf(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> HttperfApp:
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


