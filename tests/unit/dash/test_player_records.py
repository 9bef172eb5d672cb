"""The DASH players as records (dash.players.KINDS): the views the config and the app read, and the Debian
packages setup.sh installs from them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nest_experiments.config.dash import _dash_player_and_media
from nest_experiments.config.tomlread import Table
from nest_experiments.dash import players
from nest_experiments.errors import ConfigError
from tests.conftest import ROOT


def test_the_views_are_the_records() -> None:
    assert players.PLAYERS == ("nest", "dashjs", "firefox", "gpac")
    assert players.BROWSERS == ("dashjs", "firefox") and players.DECODING == ("dashjs", "firefox", "gpac")
    assert players.TRANSPORTS["gpac"] == ("tcp", "mptcp", "h2", "h3") and "race" in players.TRANSPORTS["nest"]
    assert [k.launch for k in players.KINDS.values()] == ["ours", "browser", "browser", "gpac"]
    assert {k.name: k.own_racing for k in players.KINDS.values() if k.own_racing} == {"dashjs": "chromium",
                                                                                       "firefox": "firefox"}


def test_setup_sh_reads_the_players_packages_from_the_records() -> None:
    out = subprocess.run([sys.executable, "-m", "nest_experiments.dash.players", "--apt"], capture_output=True,
                         text=True, check=True).stdout
    assert out.split() == list(players.apt_packages()) == ["chromium", "firefox-esr", "libnss3-tools", "mptcpize"]
    assert "install_player_packages" in (ROOT / "setup.sh").read_text()  # and setup.sh asks for them


def test_a_codec_the_players_decoder_refuses_is_refused_by_the_config() -> None:
    t = Table("apps.video", {"player": "dashjs", "codec": "hevc"})
    with pytest.raises(ConfigError, match="apps.video.codec.*HEVC"):
        _dash_player_and_media(t, "tcp", "dynamic")
    player, media, codec, _ = _dash_player_and_media(Table("apps.video", {"player": "gpac", "codec": "hevc"}),
                                                     "tcp", "grate")
    assert (player, media, codec) == ("gpac", "encoded", "hevc")  # GPAC's decoder has HEVC
