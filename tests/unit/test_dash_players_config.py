"""The dash app's ``player`` and ``media`` keys: defaults, errors naming the key, a missing player refused by the
preflight (the config itself does not probe the machine)."""

from __future__ import annotations

from typing import Any

import pytest

from nest_experiments.config import DashApp, parse_experiment
from nest_experiments.config.sweep import RunSpec
from nest_experiments.dash import players
from nest_experiments.errors import ConfigError
from nest_experiments.runs.preflight import preflight


def _exp(**app: Any) -> dict[str, Any]:
    return {"experiment": {"name": "d", "topology": "dumbbell", "duration": "30s"},
            "apps": {"v": {"kind": "dash", "server": "s1", "client": "h1", **app}}}


def test_our_player_keeps_generated_media_by_default() -> None:
    (app,) = parse_experiment(_exp()).apps
    assert isinstance(app, DashApp)
    assert (app.player, app.media, app.codec, app.source) == ("nest", "generated", "h264", None)


def test_our_player_plays_encoded_media() -> None:
    (app,) = parse_experiment(_exp(media="encoded", codec="vp9")).apps
    assert isinstance(app, DashApp) and (app.media, app.codec) == ("encoded", "vp9")


def test_decoding_players_default_to_encoded_media_and_their_own_abr() -> None:
    (js,) = parse_experiment(_exp(player="dashjs", transport="h3")).apps
    assert isinstance(js, DashApp) and (js.player, js.media, js.abr) == ("dashjs", "encoded", "dynamic")
    (gp,) = parse_experiment(_exp(player="gpac", abr="bba")).apps
    assert isinstance(gp, DashApp) and (gp.player, gp.media, gp.abr) == ("gpac", "encoded", "bba")
    assert players.gpac_algo(gp.abr) == "bba0" and players.gpac_algo("bolaf") == "bolaf"


@pytest.mark.parametrize(("app", "message"), [
    ({"player": "vlc"}, "apps.v.player: "),
    ({"player": "dashjs", "media": "generated"}, "apps.v.media: player 'dashjs' decodes"),
    ({"player": "gpac", "threshold": "10s"}, "apps.v.threshold: GPAC rebuffers only with a threshold below"),
    ({"player": "dashjs", "transport": "mptcp"}, "apps.v.transport: player 'dashjs' plays over tcp, h2, h3"),
    ({"player": "dashjs", "abr": "grate"}, "apps.v.abr: "),
    ({"player": "gpac", "abr": "mpc_fast"}, "apps.v.abr: "),
    ({"player": "dashjs", "abr_audio": "bola"}, "apps.v.abr_audio: player 'dashjs' adapts audio"),
    ({"codec": "h264"}, "apps.v.codec: applies to media = 'encoded' only"),
    ({"source": "x.mp4"}, "apps.v.source: applies to media = 'encoded' only"),
    ({"media": "encoded", "vbr": 0.2}, "apps.v.vbr: applies to media = 'generated' only"),
    ({"media": "encoded", "codec": "av2"}, "apps.v.codec: "),
    ({"player": "dashjs", "codec": "hevc"}, "apps.v.codec: Chromium cannot decode HEVC"),
    ({"media": "encoded", "source": "/nonexistent.mp4"}, "apps.v.source: /nonexistent.mp4: no such video file"),
    ({"media": "real"}, "apps.v.media: "),
])
def test_errors_name_the_key(app: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_experiment(_exp(**app))
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("codec", ["h264", "vp9", "av1"])
def test_dashjs_takes_the_codecs_chromium_decodes(codec: str) -> None:
    (app,) = parse_experiment(_exp(player="dashjs", codec=codec)).apps
    assert isinstance(app, DashApp) and app.codec == codec


def test_a_missing_player_is_refused_by_the_preflight_with_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(players.shutil, "which", lambda name: None)
    gpac, dashjs = (RunSpec(name="r", repetition=1, point=(), experiment=parse_experiment(_exp(player=p)))
                    for p in ("gpac", "dashjs"))  # the config loads: it does not probe this machine
    with pytest.raises(ConfigError) as err:
        preflight([gpac])
    assert str(err.value) == f"apps.v.player: {players.GPAC_HINT}"
    with pytest.raises(ConfigError) as err:
        preflight([dashjs])
    assert str(err.value) == f"apps.v.player: {players.CHROMIUM_HINT}"
    monkeypatch.setattr(players.shutil, "which", lambda name: f"/usr/bin/{name}")
    preflight([gpac])  # GPAC installed: nothing to refuse


def test_gpac_over_mptcp_needs_mptcpize(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(players.shutil, "which", lambda name: None if name == "mptcpize" else f"/usr/bin/{name}")
    assert players.missing("gpac", "tcp") is None
    assert players.missing("gpac", "mptcp") == players.MPTCPIZE_HINT


def test_dashjs_races_only_behind_caddy() -> None:
    (js,) = parse_experiment(_exp(player="dashjs", transport="race", http_server="caddy")).apps
    assert isinstance(js, DashApp) and (js.transport, js.http_server) == ("race", "caddy")
    with pytest.raises(ConfigError) as info:
        parse_experiment(_exp(player="dashjs", transport="race"))
    assert info.value.path == "apps.v.http_server" and "alt-svc" in str(info.value)


def test_abandon_is_dashjs_rule_for_our_player_on_request_and_always_for_dashjs() -> None:
    (ours,) = parse_experiment(_exp()).apps
    (rule,) = parse_experiment(_exp(abandon="dashjs")).apps
    (js,) = parse_experiment(_exp(player="dashjs", transport="h3")).apps
    assert isinstance(ours, DashApp) and isinstance(rule, DashApp) and isinstance(js, DashApp)
    assert (ours.abandon, rule.abandon, js.abandon) == ("none", "dashjs", "dashjs")
    (js2,) = parse_experiment(_exp(player="dashjs", transport="h3", abandon="dashjs")).apps  # a sweep's shared key
    assert isinstance(js2, DashApp) and js2.abandon == "dashjs"


def test_page_is_the_dashjs_page_for_our_player_on_request_and_always_for_dashjs() -> None:
    (ours,) = parse_experiment(_exp()).apps
    (paged,) = parse_experiment(_exp(page="dashjs")).apps
    (js,) = parse_experiment(_exp(player="dashjs", transport="h3")).apps
    assert isinstance(ours, DashApp) and isinstance(paged, DashApp) and isinstance(js, DashApp)
    assert (ours.page, paged.page, js.page) == ("none", "dashjs", "dashjs")
    assert (ours.initial_bitrate, js.initial_bitrate) == ("abr", "dashjs")
    assert (ours.schedule, js.schedule) == ("buffer", "dashjs")
    (started,) = parse_experiment(_exp(initial_bitrate="dashjs")).apps
    assert isinstance(started, DashApp) and started.initial_bitrate == "dashjs"
    with pytest.raises(ConfigError, match=r"apps\.v\.page.*loads its page"):
        parse_experiment(_exp(player="dashjs", transport="h3", page="none"))
    with pytest.raises(ConfigError, match=r"apps\.v\.page.*not 'gpac'"):
        parse_experiment(_exp(player="gpac", page="dashjs"))


@pytest.mark.parametrize(("app", "message"), [
    ({"abandon": "sometimes"}, "apps.v.abandon"),
    ({"player": "dashjs", "transport": "h3", "abandon": "none"}, "AbandonRequestsRule"),
    ({"player": "gpac", "abandon": "dashjs"}, "not 'gpac'"),
])
def test_abandon_errors_name_the_key(app: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_experiment(_exp(**app))
    assert "apps.v.abandon" in str(err.value) and message in str(err.value)


def test_http_cache_is_the_browsers_cache_for_our_player_on_request_and_always_for_the_browsers() -> None:
    (ours,) = parse_experiment(_exp()).apps
    (cached,) = parse_experiment(_exp(http_cache="browser", transport="race")).apps
    (js,) = parse_experiment(_exp(player="dashjs", transport="h3")).apps
    (js2,) = parse_experiment(_exp(player="dashjs", transport="h3", http_cache="browser")).apps  # a shared key
    assert isinstance(ours, DashApp) and isinstance(cached, DashApp) and isinstance(js, DashApp)
    assert isinstance(js2, DashApp)
    assert (ours.http_cache, cached.http_cache, js.http_cache, js2.http_cache) == ("none", "browser", "browser",
                                                                                   "browser")


@pytest.mark.parametrize(("app", "message"), [
    ({"http_cache": "disk"}, "not one of none, browser"),
    ({"player": "dashjs", "transport": "h3", "http_cache": "none"}, "has its own HTTP cache: 'browser'"),
    ({"player": "gpac", "http_cache": "browser"}, "not 'gpac'"),
    ({"transport": "h3", "h3_client": "quic-go", "http_cache": "browser"}, "reports no response headers"),
])
def test_http_cache_errors_name_the_key(app: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_experiment(_exp(**app))
    assert "apps.v.http_cache" in str(err.value) and message in str(err.value)


def test_idle_timeout_is_our_players_guard_a_time_or_none_to_wait_as_long_as_the_session() -> None:
    (default,) = parse_experiment(_exp()).apps
    (minutes,) = parse_experiment(_exp(idle_timeout="2min")).apps
    (waits,) = parse_experiment(_exp(idle_timeout="none")).apps
    assert isinstance(default, DashApp) and isinstance(minutes, DashApp) and isinstance(waits, DashApp)
    assert (default.idle_timeout_s, minutes.idle_timeout_s, waits.idle_timeout_s) == (30.0, 120.0, None)


@pytest.mark.parametrize(("app", "message"), [
    ({"idle_timeout": "0s"}, "apps.v.idle_timeout"),
    ({"idle_timeout": "forever"}, "apps.v.idle_timeout"),
    ({"player": "dashjs", "transport": "h3", "idle_timeout": "none"}, "applies to player = 'nest', not 'dashjs'"),
    ({"player": "gpac", "idle_timeout": "60s"}, "applies to player = 'nest', not 'gpac'"),
])
def test_idle_timeout_errors_name_the_key(app: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_experiment(_exp(**app))
    assert "apps.v.idle_timeout" in str(err.value) and message in str(err.value)
