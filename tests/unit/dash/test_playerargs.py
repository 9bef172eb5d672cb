"""The one player command line (dash.playerargs): what the dash app writes, each of the three players reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from nest_experiments.dash import players
from nest_experiments.dash.core.abr import registry as abr
from nest_experiments.dash.core.abr.base import DEFAULT_ABR
from nest_experiments.dash.players import browser, client, gpacplayer
from nest_experiments.dash.players.playerargs import PlayerArgs

SESSION = PlayerArgs(server="10.0.1.2", port=8443, transport="h2", out=Path("/tmp/out"), abr="bola",
                     max_buffer_s=12.5, threshold_s=0.5, t0=1234.000001, go_file=Path("/tmp/go"),
                     max_duration_s=88.0, ca=Path("/tmp/ca.pem"))


def test_to_argv_and_back_is_the_same_session() -> None:
    for args in (SESSION, PlayerArgs(server="s", port=1, transport="tcp", out=Path("o"))):
        parser = PlayerArgs.parser(prog="p", description=None, transports=("tcp", "h2"))
        assert PlayerArgs.from_argv(args.to_argv(), parser)[0] == args


@pytest.mark.parametrize(("module", "extra"), [
    (client, ["--mpd", "/manifest.mpd"]),
    (browser, ["--page", "/p.html", "--mpd-file", "/m.mpd", "--profile", "/prof"]),
    (gpacplayer, ["--mpd-file", "/m.mpd"]),
])
def test_every_player_reads_the_shared_options_as_written(module: object, extra: list[str]) -> None:
    ns = module.parse_args([*SESSION.to_argv(), *extra])  # type: ignore[attr-defined]
    assert PlayerArgs.from_namespace(ns) == SESSION


def test_the_default_abr_is_ours_and_gpacs_twin_and_what_a_player_gets_without_one() -> None:
    assert DEFAULT_ABR in abr.available_abrs() and players.gpac_algo(DEFAULT_ABR) in players.abr_names("gpac", ())
    ns = client.parse_args(["--server", "s", "--port", "1", "--transport", "tcp", "--out", "o", "--mpd", "/m"])
    assert (ns.abr, ns.abr_audio) == (DEFAULT_ABR, DEFAULT_ABR)
    assert players.default_abr("nest") == players.default_abr("gpac") == DEFAULT_ABR != players.default_abr("dashjs")
