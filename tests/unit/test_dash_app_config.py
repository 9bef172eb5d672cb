from __future__ import annotations

from typing import Any

import pytest

from nest_experiments.config import DashApp, parse_experiment
from nest_experiments.errors import ConfigError
from nest_experiments.net.kernel import features_needed


def _exp(**app: Any) -> dict[str, Any]:
    return {"experiment": {"name": "d", "topology": "dumbbell", "duration": "30s"},
            "apps": {"v": {"kind": "dash", "server": "s1", "client": "h1", **app}}}


def test_dash_defaults() -> None:
    (app,) = parse_experiment(_exp()).apps
    assert isinstance(app, DashApp)
    assert (app.transport, app.ladder, app.clip_s, app.abr, app.abr_audio) == ("tcp", "eldorado_av1", None, "grate", "grate")
    assert (app.max_buffer_s, app.threshold_s, app.vbr, app.mptcp_endpoints, app.mptcp_subflows) == (10.0, 1.0, 0.0, "fullmesh", 2)
    assert app.kernel_features == ()
    assert app.mptcp_add_addr_timeout_s is None  # the kernel's own


def test_dash_add_addr_timeout_in_whole_seconds() -> None:
    (app,) = parse_experiment(_exp(transport="mptcp", mptcp_add_addr_timeout="1s")).apps
    assert isinstance(app, DashApp) and app.mptcp_add_addr_timeout_s == 1
    (app,) = parse_experiment(_exp(transport="mptcp", mptcp_add_addr_timeout="2min")).apps
    assert isinstance(app, DashApp) and app.mptcp_add_addr_timeout_s == 120


def test_dash_mptcp_needs_the_kernel_feature() -> None:
    exp = parse_experiment(_exp(transport="mptcp", clip="20s", mptcp_endpoints="subflow", mptcp_subflows=3, vbr=0.2))
    (app,) = exp.apps
    assert isinstance(app, DashApp) and app.clip_s == 20.0 and app.mptcp_subflows == 3 and app.vbr == 0.2
    assert features_needed(exp)["mptcp"] == "apps.v"


@pytest.mark.parametrize(("key", "value", "message"), [
    ("transport", "quic", "apps.v.transport"),
    ("ladder", "nope", "apps.v.ladder"),
    ("abr", "bbb", "did you mean 'bba'"),
    ("clip", "1000s", "apps.v.clip"),
    ("threshold", "20s", "apps.v.threshold"),
    ("vbr", 3, "apps.v.vbr"),
    ("client", "s1", "apps.v.client"),
    ("mptcp_endpoints", "signal", "apps.v.mptcp_endpoints"),
    ("mptcp_add_addr_timeout", "1500ms", "apps.v.mptcp_add_addr_timeout: 1.5 s is not a whole number: net.mptcp.add_addr_timeout is an int of jiffies"),
    ("mptcp_add_addr_timeout", "0s", "apps.v.mptcp_add_addr_timeout: must be greater than zero"),
    ("mptcp_add_addr_timeout", 1, "apps.v.mptcp_add_addr_timeout: duration 1 needs a unit"),
    ("bogus", 1, "apps.v.bogus"),
    ("level", 2, "apps.v.level: applies to abr = 'fixed' only"),
])
def test_dash_errors_name_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_experiment(_exp(**{key: value}))


def test_fixed_level_is_an_index_or_one_of_the_ladders_bitrates() -> None:
    (app,) = parse_experiment(_exp(ladder="bbb_h2quic_video", abr="fixed", level=13)).apps
    assert isinstance(app, DashApp) and (app.abr, app.abr_audio, app.level) == ("fixed", "fixed", 13)
    (app,) = parse_experiment(_exp(ladder="bbb_h2quic_video", abr="fixed", level="1600kbit")).apps
    assert isinstance(app, DashApp) and app.level == 8
    (app,) = parse_experiment(_exp(ladder="bbb_h2quic_video", abr="fixed")).apps
    assert isinstance(app, DashApp) and app.level == 0


@pytest.mark.parametrize(("value", "message"), [
    (14, "apps.v.level: level 14 is not in ladder 'bbb_h2quic_video': 0..13"),
    ("1500kbit", "apps.v.level: '1500kbit' is not a video bitrate of ladder 'bbb_h2quic_video' (100kbit, 200kbit"),
    ("1600kbps", "apps.v.level: '1600kbps': tc reads 'kbps' as bytes/s"),
])
def test_fixed_level_errors_name_the_key(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_experiment(_exp(ladder="bbb_h2quic_video", abr="fixed", level=value))
