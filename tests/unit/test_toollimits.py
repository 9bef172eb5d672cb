"""Tool limits at load: every numeric key of every app kind is refused outside the range of the tool behind it,
in one line naming the key, the range and why."""

from __future__ import annotations

from typing import Any

import pytest

from nest_experiments.config import parse_experiment, toollimits
from nest_experiments.errors import ConfigError

NODES = {"iperf3": ("src", "dst"), "sipp": ("src", "dst"), "httperf": ("src", "dst"), "dash": ("server", "client")}


def _load(kind: str, run: str = "30s", **keys: Any) -> Any:
    a, b = NODES[kind]
    raw = {"experiment": {"name": "lim", "topology": "dumbbell", "duration": run},
           "apps": {"x": {"kind": kind, a: "h1", b: "s1", **keys}}}
    (app,) = parse_experiment(raw).apps
    return app


def _refused(kind: str, message: str, *, run: str = "30s", **keys: Any) -> None:
    with pytest.raises(ConfigError) as info:
        _load(kind, run, **keys)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(message), text


@pytest.mark.parametrize("kind, keys, message", [
    # iperf3 3.12: "number of parallel streams too large (maximum = 128)"
    ("iperf3", {"flows": 100000}, "apps.x.flows: 100000 is out of range 1..128: iperf3 -P allows at most 128"),
    ("iperf3", {"flows": 129}, "apps.x.flows: 129 is out of range 1..128"),
    ("iperf3", {"flows": 0}, "apps.x.flows: 0 is out of range 1..128"),
    ("iperf3", {"flows": 2.5}, "apps.x.flows: expected an integer in 1..128, got 2.5"),
    # "invalid report interval (min = 0.1, max = 60 seconds)"
    ("iperf3", {"interval": "50ms"}, "apps.x.interval: 0.05 s is out of range 0.1..60 s: iperf3 -i allows 0.1..60 s"),
    ("iperf3", {"interval": "61s"}, "apps.x.interval: 61 s is out of range 0.1..60 s"),
    ("iperf3", {"port": 65536}, "apps.x.port: 65536 is out of range 1024..65535"),
    ("iperf3", {"port": 80}, "apps.x.port: 80 is out of range 1024..65535"),
    # -t is atoi'd: 2.5 s would run 2 s
    ("iperf3", {"duration": "2500ms"}, "apps.x.duration: 2.5 s is not a whole number: iperf3 -t takes whole seconds"),
    ("iperf3", {"start": "500ms"}, "apps.x.start: 29.5 s is not a whole number: iperf3 -t"),
    ("sipp", {"rate": 1001}, "apps.x.rate: 1001 calls/s is out of range 0.001..1000 calls/s: this project's bound"),
    ("sipp", {"rate": 0}, "apps.x.rate: 0 calls/s is out of range"),
    ("sipp", {"media_port": 65533}, "apps.x.media_port: 65533 is out of range 1024..65532: SIPp binds "
                                    "media_port..media_port+3"),
    ("sipp", {"port": 70000}, "apps.x.port: 70000 is out of range 1024..65535"),
    ("sipp", {"call_length": "10ms"}, "apps.x.call_length: 0.01 s is out of range 0.02..3600 s"),
    ("sipp", {"call_length": "120min"}, "apps.x.call_length: 7200 s is out of range 0.02..3600 s"),
    ("sipp", {"timer_slack": "30ms"}, "apps.x.timer_slack: 0.03 s is out of range 0..0.02 s"),
    ("httperf", {"rate": 0}, "apps.x.rate: 0/s is out of range 0.001..10000/s: httperf --rate (0 would mean"),
    ("httperf", {"rate": 500}, "apps.x.timeout: rate x timeout (500/s x 5 s) = 2500 is out of range 0..1000: httperf "
                               "waits with select(), which holds at most 1024 descriptors (FD_SETSIZE)"),
    ("httperf", {"rate": 100, "timeout": "11s"}, "apps.x.timeout: rate x timeout (100/s x 11 s) = 1100"),
    ("httperf", {"size": "2048mb"}, "apps.x.size: 2147483648 bytes is out of range 1..1073741824 bytes"),
    ("httperf", {"cpu_limit": "0.5%"}, "apps.x.cpu_limit: 0.5% is out of range 1..100%"),
    ("httperf", {"port": 1}, "apps.x.port: 1 is out of range 1024..65535"),
    ("dash", {"transport": "mptcp", "mptcp_subflows": 9},
     "apps.x.mptcp_subflows: 9 is out of range 1..8: the kernel's MPTCP path manager allows at most 8"),
    ("dash", {"mptcp_subflows": 0}, "apps.x.mptcp_subflows: 0 is out of range 1..8"),
    ("dash", {"mptcp_add_addr_timeout": "1500ms"}, "apps.x.mptcp_add_addr_timeout: 1.5 s is not a whole number"),
])
def test_out_of_range_values_are_refused_at_load(kind: str, keys: dict[str, Any], message: str) -> None:
    _refused(kind, message, **keys)


def test_add_addr_timeout_above_int_max_jiffies_is_refused() -> None:
    _refused("dash", "apps.x.mptcp_add_addr_timeout: 2147484 s is out of range 1..2147483 s: net.mptcp.add_addr_timeout",
             mptcp_add_addr_timeout="2147484s")


def test_iperf3_longer_than_a_day_is_refused_even_when_the_run_is_longer() -> None:
    _refused("iperf3", "apps.x.start: 90000 s is out of range 1..86400 s: iperf3 -t", run="1500min")
    _refused("iperf3", "apps.x.duration: 86401 s is out of range 1..86400 s", run="1500min", duration="86401s")
    assert _load("iperf3", "1500min", duration="86400s").duration_s == 86400


@pytest.mark.parametrize("kind, keys, attr, value", [
    ("iperf3", {"flows": 128}, "flows", 128),
    ("iperf3", {"flows": 1}, "flows", 1),
    ("iperf3", {"interval": "100ms"}, "interval_s", 0.1),
    ("iperf3", {"interval": "60s"}, "interval_s", 60.0),
    ("iperf3", {"port": 65535}, "port", 65535),
    ("iperf3", {"start": "5s", "duration": "25s"}, "duration_s", 25.0),
    ("sipp", {"rate": 1000, "call_length": "20ms"}, "rate", 1000.0),
    ("sipp", {"media_port": 65532}, "media_port", 65532),
    ("sipp", {"timer_slack": "0ms"}, "timer_slack_s", 0.0),
    ("httperf", {"rate": 200}, "rate", 200.0),  # 200/s x 5 s = 1000 open at most
    ("httperf", {"cpu_limit": "100%"}, "cpu_limit", 1.0),
    ("dash", {"transport": "mptcp", "mptcp_subflows": 8}, "mptcp_subflows", 8),
    ("dash", {"mptcp_add_addr_timeout": "2147483s"}, "mptcp_add_addr_timeout_s", 2147483),
])
def test_values_at_the_limits_load(kind: str, keys: dict[str, Any], attr: str, value: object) -> None:
    assert getattr(_load(kind, **keys), attr) == value


def test_each_app_kind_has_one_table_of_limits() -> None:
    assert set(toollimits.IPERF3) == {"flows", "duration", "interval", "port"}
    assert set(toollimits.SIPP) == {"rate", "call_length", "port", "media_port", "timer_slack"}
    assert set(toollimits.HTTPERF) == {"rate", "open_connections", "size", "cpu_limit", "port"}
    assert set(toollimits.DASH) == {"mptcp_subflows", "mptcp_add_addr_timeout"}
    for table in (toollimits.IPERF3, toollimits.SIPP, toollimits.HTTPERF, toollimits.DASH):
        assert all(limit.low <= limit.high and limit.why for limit in table.values())
