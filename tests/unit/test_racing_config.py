"""``racing`` and ``racing_params`` of a dash app (our player over ``transport = "race"``)."""

from __future__ import annotations

from typing import Any

import pytest

from nest_experiments.config import DashApp, parse_experiment
from nest_experiments.dash.core import racing
from nest_experiments.errors import ConfigError


def _app(**app: Any) -> DashApp:
    raw = {"experiment": {"name": "d", "topology": "dumbbell", "duration": "30s"},
           "apps": {"v": {"kind": "dash", "server": "s1", "client": "h1", **app}}}
    (parsed,) = parse_experiment(raw).apps
    assert isinstance(parsed, DashApp)
    return parsed


def test_race_defaults_to_chromium_with_chromiums_numbers() -> None:
    app = _app(transport="race")
    assert (app.racing, app.racing_params) == ("chromium", ())
    assert racing.params_from(dict(app.racing_params)) == racing.RacingParams()


def test_racing_params_times_drop_the_unit_suffix_and_round_trip() -> None:
    app = _app(transport="race", racing="dynamic", racing_params={
        "idle_timeout": "29s", "probe_interval": "5s", "probe_window": 10, "min_probes": 3, "rtt_ratio": 2.5,
        "broken_initial": "5min", "backup_delay": "100ms"})
    params = racing.params_from(dict(app.racing_params))
    assert (params.idle_timeout_s, params.probe_interval_s, params.probe_window, params.min_probes) == (29, 5, 10, 3)
    assert (params.rtt_ratio, params.broken_initial_s, params.backup_delay_s) == (2.5, 300, 0.1)


def test_the_quic_detectors_and_the_backoff_cap_are_racing_params() -> None:
    app = _app(transport="race", racing_params={"blackhole_rtos": 3, "ping_timeout": "10s",
                                                "broken_max_delay": "172800s"})
    params = racing.params_from(dict(app.racing_params))
    assert (params.blackhole_rtos, params.ping_timeout_s, params.broken_max_delay_s) == (3, 10.0, 172800.0)
    assert isinstance(params.blackhole_rtos, int)
    with pytest.raises(ConfigError, match="quic_stall_timeout"):  # gone: QUICHE's detectors replace it
        _app(transport="race", racing_params={"quic_stall_timeout": "6.2s"})


@pytest.mark.parametrize(("app", "path", "message"), [
    ({"racing": "dynamic"}, "apps.v.racing", "transport = 'race'"),
    ({"transport": "h3", "racing_params": {"rtt_ratio": 3}}, "apps.v.racing_params", "transport = 'race'"),
    ({"transport": "race", "racing": "edge"}, "apps.v.racing", "edge"),
    ({"transport": "race", "racing_params": {"idle_timeout_s": 3}}, "apps.v.racing_params.idle_timeout_s",
     "did you mean 'idle_timeout'"),
    ({"transport": "race", "racing_params": {"rtt_ratio": 0}}, "apps.v.racing_params.rtt_ratio", "> 0"),
    ({"transport": "race", "racing_params": {"probe_interval": "fast"}}, "apps.v.racing_params.probe_interval", "duration"),
    ({"transport": "race", "racing_params": {"min_probes": 11}}, "apps.v.racing_params.min_probes",
     "exceeds probe_window"),
    ({"transport": "race", "h3_client": "quic-go"}, "apps.v.h3_client", "not 'quic-go'"),
])
def test_bad_racing_keys_name_the_key(app: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _app(**app)
    assert err.value.path == path
