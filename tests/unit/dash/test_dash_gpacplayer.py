"""player = "gpac": GPAC's command per transport, its -log-utc times on the run clock, the whole player
process against a stand-in ``gpac`` that replays a real GPAC 26.07 log (tests/data/gpac)."""

from __future__ import annotations

import csv
import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from nest_experiments.dash import players
from nest_experiments.dash.content.mpd import parse_mpd
from nest_experiments.dash.core.records import SEGMENT_FIELDS
from nest_experiments.dash.players import gpac, gpacplayer
from nest_experiments.errors import MissingToolError

DATA = Path(__file__).resolve().parents[2] / "data" / "gpac"
FIRST_TS_S = 1795307305.748  # the first "UTC ... (TS ms)" of bba0_rbuf1000_log-utc.log (checked below)


def test_gpac_argv_per_transport() -> None:
    common = {"binary": "/opt/gpac", "url": "http://10.0.1.2:8080/manifest.mpd", "algo": "bba0",
              "max_buffer_s": 10.0, "threshold_s": 1.0}
    tcp = gpacplayer.gpac_argv(transport="tcp", **common)  # type: ignore[arg-type]
    assert tcp[:4] == ["/opt/gpac", "-p=0", "-i", "http://10.0.1.2:8080/manifest.mpd:gpac:algo=bba0:start_with=min_bw:debug_as=0,1"]
    assert "aout:buffer=2000:mbuffer=10000:rbuffer=1000" in tcp and "-log-utc" in tcp
    assert not {"-broken-cert", "-h3=only"} & set(tcp)
    assert not [a for a in tcp if a.startswith("-cache")]  # no folder given: GPAC's own (/tmp/gpac_cache)
    private = gpacplayer.gpac_argv(transport="tcp", cache_dir=Path("/run/x/cache"), **common)  # type: ignore[arg-type]
    assert [a for a in private if a.startswith("-cache")] == ["-cache=/run/x/cache"]  # GPAC 1.0.1 and 26.07's option
    mptcp = gpacplayer.gpac_argv(transport="mptcp", mptcpize="/usr/bin/mptcpize", **common)  # type: ignore[arg-type]
    assert mptcp[:2] == ["/usr/bin/mptcpize", "run"] and mptcp[2:] == tcp
    h3 = gpacplayer.gpac_argv(transport="h3", **common)  # type: ignore[arg-type]
    assert h3[-2:] == ["-broken-cert", "-h3=only"]
    with pytest.raises(MissingToolError, match="mptcpize is not installed"):
        gpacplayer.gpac_argv(transport="mptcp", mptcpize=None, **common)  # type: ignore[arg-type]
    assert gpacplayer.mpd_url("h2", "10.0.1.2", 8443) == "https://10.0.1.2:8443/manifest.mpd"


def test_gpac_1_0_argv_over_mptcp() -> None:
    """GPAC 1.0.x (Debian bullseye's, what setup.sh installs on bookworm): its own command line, same prefix."""
    argv = gpacplayer.gpac_argv(transport="mptcp", mptcpize="/usr/bin/mptcpize", binary="/usr/bin/gpac",
                                url="http://10.0.1.2:8080/manifest.mpd", algo="grate", max_buffer_s=10.0,
                                threshold_s=1.0, legacy=True)
    assert argv[:6] == ["/usr/bin/mptcpize", "run", "/usr/bin/gpac", "-p=0", "-i",
                        "http://10.0.1.2:8080/manifest.mpd:gpac:algo=grate:start_with=min_bw"]
    assert argv[6:8] == ["aout:buffer=2000", "vout:disp=soft:buffer=2000"]
    assert gpacplayer.gpac_environment(Path("/h"), ":3")["DISPLAY"] == ":3"
    assert "DISPLAY" not in gpacplayer.gpac_environment(Path("/h"))


def test_our_names_map_to_gpacs_twins() -> None:
    assert [players.gpac_algo(a) for a in ("grate", "bba", "bolaf", "gbuf")] == ["grate", "bba0", "bolaf", "gbuf"]
    # every abr an experiment may give GPAC is one of GPAC's algorithms (26.07: tests/data/gpac/README.md), and each
    # of those can be given
    assert {players.gpac_algo(a) for a in players.abr_names("gpac", ())} == set(gpac.GPAC_ALGOS)


def test_log_utc_times_move_onto_the_run_clock() -> None:
    text = (DATA / "bba0_rbuf1000_log-utc.log").read_text(errors="replace")
    log = gpac.parse_gpac_log(text, parse_mpd((DATA / "manifest.mpd").read_text()), transport="tcp")
    # the run's t = 0 was 2.5 s of wall time before GPAC's first stamp
    wall_minus_mono, t0 = 1000.0, FIRST_TS_S - 1000.0 - 2.5
    shift = gpacplayer.run_clock_shift(text, wall_minus_mono=wall_minus_mono, t0=t0)
    assert shift == pytest.approx(2.5)
    rows = gpacplayer.shifted(list(log.segments), shift)
    assert len(rows) == 30 and all(r.t_first_byte is None for r in rows)
    for before, after in zip(log.segments, rows, strict=True):
        assert after.t_last_byte == pytest.approx((before.t_last_byte or 0) + 2.5)
    assert min(r.t_last_byte or 0 for r in rows) > 2.5
    assert gpacplayer.shifted(list(log.segments), None)[0].t_last_byte is None  # no stamp: times unknown
    choices = gpacplayer.decisions(log, shift, "bba0")
    assert choices and {d.algorithm for d in choices} == {"gpac:bba0"} and {d.stream for d in choices} <= {"video", "audio"}


def test_the_player_process_against_a_stand_in_gpac(tmp_path: Path) -> None:
    """gpacplayer.main with a `gpac` that prints a captured GPAC log on stderr, as GPAC does."""
    fake = tmp_path / "bin" / "gpac"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport sys\nif '-version' in sys.argv:\n"
                    "    print('gpac - GPAC command line filter engine - version 26.07-revrelease'); sys.exit(0)\n"
                    f"sys.stderr.write(open({str(DATA / 'bba0_rbuf1000_log-utc.log')!r}, errors='replace').read())\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{fake.parent}:{old}"
    try:
        code = gpacplayer.main(["--server", "10.77.1.2", "--port", "8000", "--transport", "tcp",
                                "--mpd-file", str(DATA / "manifest.mpd"), "--abr", "bba", "--out", str(tmp_path / "o"),
                                "--t0", repr(time.monotonic())])
    finally:
        os.environ["PATH"] = old
    assert code == 0
    with (tmp_path / "o" / "segments.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ()) == SEGMENT_FIELDS
        rows = list(reader)
    assert len(rows) == 30 and {r["stream"] for r in rows} == {"audio", "video"}
    doc = json.loads((tmp_path / "o" / "qoe.json").read_text())
    assert doc["gpac_algo"] == "bba0" and doc["end_reason"] == "ended" and doc["player"] == "gpac"
    assert doc["client"].startswith("gpac (gpac - GPAC command line filter engine - version 26.07")
    assert doc["stalls"] == 10 and doc["qoe"]["session"]["stall_count"] > 0  # bba0 rebuffered in this log
    assert (tmp_path / "o" / "gpac.log").read_text(errors="replace").count("[DASH]") > 30


def test_gpacs_default_cache_folder_is_removed_only_if_it_is_ours_and_empty(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "gpac_cache"
    monkeypatch.setattr(gpac, "DEFAULT_CACHE", folder)
    folder.mkdir()
    gpac.remove_default_cache(existed=True)  # someone else's: kept
    assert folder.is_dir()
    gpac.remove_default_cache(existed=False)  # GPAC's start-up made it, empty: removed
    assert not folder.exists()
    folder.mkdir()
    (folder / "entry").write_text("x")
    gpac.remove_default_cache(existed=False)  # not empty: another GPAC filled it meanwhile, kept
    assert (folder / "entry").exists()
    gpac.remove_default_cache(existed=False)  # and a second call is harmless
