"""The Firefox player's pure parts: its profile's prefs, racing.csv from Resource Timing, the Marionette client."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from nest_experiments.dash import players
from nest_experiments.dash.players import firefoxplayer as ff
from nest_experiments.dash.players.firefoxplayer import Marionette


def test_race_turns_http3_on_forces_nothing_and_allows_our_root() -> None:
    race = ff.prefs(transport="race", server="10.0.0.1", port=8443)
    assert race["network.http.http3.enable"] is True
    assert race["network.http.http3.disable_when_third_party_roots_found"] is False  # else NS_ERROR_NET_RESET
    assert "network.http.http3.alt-svc-mapping-for-testing" not in race  # discovered from alt-svc, as a browser
    h3 = ff.prefs(transport="h3", server="10.0.0.1", port=8443)
    assert h3["network.http.http3.alt-svc-mapping-for-testing"] == "10.0.0.1;h3=:8443"
    assert ff.prefs(transport="h2", server="10.0.0.1", port=8443)["network.http.http3.enable"] is False


def test_the_profile_without_a_ca_is_user_js_only(tmp_path: Path) -> None:
    ff.write_profile(tmp_path / "p", ca=None, transport="tcp", server="10.0.0.1", port=8080)
    assert [p.name for p in (tmp_path / "p").iterdir()] == ["user.js"]
    text = (tmp_path / "p" / "user.js").read_text()
    assert 'user_pref("marionette.port", 2828);' in text and 'user_pref("services.settings.server", "");' in text


def test_bound_rows_take_the_protocol_of_each_request_to_the_origin() -> None:
    resources = [
        {"url": "https://10.0.0.1:8443/nest_dashjs.html?mpd=x", "start": 1000.0, "protocol": "h2"},
        {"url": "https://10.0.0.1:8443/seg_1_1.m4s", "start": 3000.0, "protocol": "h3"},
        {"url": "https://other:1/x", "start": 2000.0, "protocol": "h3"},  # not the origin
        {"url": "https://10.0.0.1:8443/seg_0_1.m4s", "start": 2500.0, "protocol": ""},  # cached / unknown
    ]
    rows = ff.bound_rows(resources, "10.0.0.1:8443", to_run=lambda wall_s: wall_s - 1.0)
    assert [(r.t, r.protocol, r.detail) for r in rows] == [(0.0, "tcp", "/nest_dashjs.html?mpd=x"),
                                                           (1.5, "", "/seg_0_1.m4s"), (2.0, "quic", "/seg_1_1.m4s")]


def test_firefox_is_a_browser_player_with_dashjs_abrs() -> None:
    assert "firefox" in players.PLAYERS and "firefox" in players.DECODING
    assert players.abr_names("firefox", ("grate",)) == players.DASHJS_ABRS and players.default_abr("firefox") == "dynamic"
    assert players.TRANSPORTS["firefox"] == ("tcp", "h2", "h3", "race")


def test_the_driver_is_not_among_firefoxs_processes(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    import time

    profile = tmp_path / "profile"
    # a process started as this driver is (``--profile PROFILE``) is not Firefox (``-profile PROFILE``)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)", "--profile", str(profile)])
    try:
        assert proc.pid not in ff.profile_pids(profile) and os.getpid() not in ff.profile_pids(profile)
    finally:
        proc.kill()
        proc.wait()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)", "-profile", str(profile)])
    try:
        time.sleep(0.2)  # Popen can return before the new command line shows in /proc
        assert ff.profile_pids(profile) == [sleeper.pid], Path(f"/proc/{sleeper.pid}/cmdline").read_bytes()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_call_waits_as_long_as_the_session_allows_not_only_the_connections_timeout() -> None:
    # behind DVL x0.25 Firefox answered a script call into the loading page only after CALL_TIMEOUT_S (30 s): the
    # session died with "timed out" (session 17's first racing_firefox run); a stand-in answers after 0.3 s
    ours, theirs = socket.socketpair()

    def firefox() -> None:
        hello = json.dumps({"marionetteProtocol": 3}).encode()
        theirs.sendall(str(len(hello)).encode() + b":" + hello)
        for _ in range(2):
            size, rest = theirs.recv(4096).split(b":", 1)
            msg_id = json.loads(rest[:int(size)])[1]
            time.sleep(0.3)
            with contextlib.suppress(OSError):
                reply = json.dumps([1, msg_id, None, {"value": 5}]).encode()
                theirs.sendall(str(len(reply)).encode() + b":" + reply)

    server = threading.Thread(target=firefox, daemon=True)
    server.start()
    ours.settimeout(0.1)  # the connection's timeout, scaled down
    mn = Marionette(ours)
    with pytest.raises(TimeoutError):
        mn.evaluate("5")
    mn.set_timeout(2.0)  # the late reply to the first call comes first: skipped by its id
    assert mn.evaluate("5") == 5
    server.join(timeout=5)
    ours.close()
    theirs.close()
