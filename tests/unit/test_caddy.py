"""Caddy as the DASH origin: its JSON configuration, its access log parsed into access.csv rows, the app keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nest_experiments import config as cfgmod
from nest_experiments.config import DashApp, parse_experiment
from nest_experiments.dash.core.records import ACCESS_LOG_FIELDS
from nest_experiments.dash.origin import caddy
from nest_experiments.errors import ConfigError, RunError
from nest_experiments.parsers import caddy as parse
from nest_experiments.studies.under_hood.metrics import server_of

DATA = Path(__file__).parent.parent / "data" / "caddy"
WALL_T0 = 1795506546.0  # the wall clock at "the run's t = 0" for the captured log


def _rows() -> list[dict[str, Any]]:
    return parse.access_rows((DATA / "access.json").read_text(), wall_t0=WALL_T0)


def test_captured_log_gives_one_row_per_response_with_our_columns() -> None:
    rows = _rows()
    assert [tuple(r) for r in rows] == [ACCESS_LOG_FIELDS] * 9
    assert [(r["transport"], r["path"], r["status"], r["bytes"]) for r in rows] == [
        ("tcp", "/manifest.mpd", 200, 6), ("tcp", "/nope.m4s", 404, 0), ("https", "/manifest.mpd", 200, 6),
        ("h2", "/v1_3.m4s", 200, 300000), ("h3", "/manifest.mpd", 200, 6), ("h3", "/manifest.mpd", 200, 6),
        ("h3", "/v1_3.m4s", 200, 300000), ("h3", "/v1_3.m4s", 200, 300000), ("h2", "/v1_3.m4s", 200, 300000),
    ]  # fmt: skip


def test_times_are_on_the_run_clock_arrival_is_end_minus_duration() -> None:
    first = _rows()[0]  # ts 1795506546.932357, duration 0.061478635
    assert first["t_last_byte_sent"] == "0.932357"
    assert first["t_arrival"] == f"{0.932357 - 0.061478635:.6f}"
    assert first["t_first_byte_sent"] == ""  # Caddy does not log it
    for row in _rows():
        assert float(row["t_arrival"]) <= float(row["t_last_byte_sent"])


def test_requests_of_one_connection_share_a_conn_id() -> None:
    h3 = {r["conn_id"] for r in _rows() if r["transport"] == "h3"}
    h2 = [r["conn_id"] for r in _rows() if r["transport"] == "h2"]
    assert h3 == {"h3-127.0.0.1:51378"}
    assert len(set(h2)) == 2  # two separate curl / fetcher connections


def test_other_lines_are_skipped_and_a_cut_last_line_is_dropped() -> None:
    text = (DATA / "access.json").read_text()
    noise = json.dumps({"level": "info", "ts": 1.0, "logger": "http", "msg": "server running"}) + "\n"
    assert len(parse.access_rows(noise + text, wall_t0=WALL_T0)) == 9
    cut = text + text.splitlines()[0][:80]  # Caddy stopped mid-write
    assert len(parse.access_rows(cut, wall_t0=WALL_T0)) == 9


def test_bad_lines_name_the_line() -> None:
    text = (DATA / "access.json").read_text()
    with pytest.raises(RunError, match=r"log, line 2: not JSON"):
        parse.access_rows(text.splitlines()[0] + "\n{oops\n" + text, wall_t0=0, what="log")
    entry = json.loads(text.splitlines()[0])
    del entry["size"]
    with pytest.raises(RunError, match=r"line 1: entry without 'size'"):
        parse.access_rows(json.dumps(entry) + "\n", wall_t0=0)


def _conf(transport: str) -> dict[str, Any]:
    return caddy.config(root=Path("/m"), addr="10.0.1.2", port=8443, transport=transport,
                        access_log=Path("/r/a.json"), storage=Path("/t/s"), chain=Path("/t/c.pem"),
                        key=Path("/t/k.pem"))  # fmt: skip


def test_tls_config_serves_h1_h2_h3_with_default_sni_and_the_run_certificate() -> None:
    conf = _conf("h3")
    server = conf["apps"]["http"]["servers"]["dash"]
    assert server["listen"] == ["10.0.1.2:8443"] and server["protocols"] == ["h1", "h2", "h3"]
    assert server["tls_connection_policies"][0]["default_sni"] == "10.0.1.2"
    assert server["routes"] == [{"handle": [  # every 200 says how long a browser may reuse it (dash.httpcache)
        {"handler": "headers", "response": {"set": {"Cache-Control": ["max-age=86400"]},
                                            "require": {"status_code": [200]}}},
        {"handler": "file_server", "root": "/m"}]}]
    assert server["automatic_https"] == {"disable": True} and conf["admin"] == {"disabled": True}
    assert conf["apps"]["tls"]["certificates"]["load_files"] == [
        {"certificate": "/t/c.pem", "key": "/t/k.pem", "tags": ["dash"]}]
    access = conf["logging"]["logs"]["dash"]
    assert access["writer"] == {"output": "file", "filename": "/r/a.json"} and access["encoder"] == {"format": "json"}
    assert access["include"] == [caddy.LOGGER] and conf["logging"]["logs"]["default"]["exclude"] == [caddy.LOGGER]
    json.dumps(conf)  # data, written as a file


def test_plain_config_has_no_tls_and_mptcp_is_refused() -> None:
    conf = _conf("tcp")
    assert conf["apps"]["http"]["servers"]["dash"]["protocols"] == ["h1"] and "tls" not in conf["apps"]
    assert "tls_connection_policies" not in conf["apps"]["http"]["servers"]["dash"]
    assert caddy.host_port("fd00::2", 8443) == "[fd00::2]:8443"
    with pytest.raises(ConfigError, match="mptcp"):
        _conf("mptcp")


def _exp(**app: Any) -> dict[str, Any]:
    return {"experiment": {"name": "d", "topology": "dumbbell", "duration": "30s"},
            "apps": {"v": {"kind": "dash", "server": "s1", "client": "h1", **app}}}


def test_dash_keys_http_server_and_h3_client() -> None:
    (app,) = parse_experiment(_exp()).apps
    assert isinstance(app, DashApp) and (app.http_server, app.h3_client) == ("nest", "qh3")
    (app,) = parse_experiment(_exp(transport="h3", http_server="caddy", h3_client="aioquic")).apps
    assert isinstance(app, DashApp) and (app.http_server, app.h3_client) == ("caddy", "aioquic")
    assert cfgmod.CADDY_TRANSPORTS == caddy.TRANSPORTS
    split = {"tcp": "webfs", "h3": "caddy"}  # a server per transport (the ABR letter's): the one for the app's
    for transport, server in split.items():
        (app,) = parse_experiment(_exp(transport=transport, http_server=split)).apps
        assert isinstance(app, DashApp) and app.http_server == server
        assert server_of({"transport": transport, "http_server": split}) == server  # a run's config.toml
    assert server_of({"transport": "h3", "http_server": "nest"}) == "nest"


@pytest.mark.parametrize(("app", "message"), [
    ({"http_server": "apache"}, r"^apps\.v\.http_server: 'apache' is not one of nest, caddy, webfs"),
    ({"http_server": "caddy", "transport": "mptcp"}, r"^apps\.v\.http_server: Caddy serves transports tcp, h2, h3"),
    ({"http_server": "webfs", "transport": "h3"}, r"^apps\.v\.http_server: webfsd serves plain HTTP/1\.1 .transport 'tcp'"),
    ({"http_server": {"tcp": "webfs", "h2": "caddy"}, "transport": "h3"},
     r"^apps\.v\.http_server: names no server for transport 'h3': add h3 = "),
    ({"http_server": {"tcp": "webfs", "quic": "caddy"}}, r"^apps\.v\.http_server\.quic: not a transport"),
    ({"http_server": {"tcp": "apache"}}, r"^apps\.v\.http_server\.tcp: 'apache' is not one of"),
    ({"h3_client": "curl"}, r"^apps\.v\.h3_client: 'curl' is not one of qh3, aioquic"),
])  # fmt: skip
def test_dash_bad_server_or_client_names_the_key(app: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_experiment(_exp(**app))


def test_config_h3_clients_are_the_transport_stacks() -> None:
    from nest_experiments.dash.http.transports import H3_CLIENTS

    assert cfgmod.DASH_H3_CLIENTS == H3_CLIENTS
