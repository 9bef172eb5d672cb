"""GPAC's DASH client as the player process of ``player = "gpac"``.

    python -m nest_experiments.dash.players.gpacplayer --server ADDR --port N --transport tcp|mptcp|h2|h3 \
        --mpd-file FILE --abr grate --max-buffer 10 --threshold 1 --out DIR (--t0 F | --go-file FILE) \
        [--max-duration S]

It runs ``gpac -i URL:gpac:algo=... aout vout`` (:func:`.gpac.gpac_command`:
SDL's dummy audio/video drivers, so no window and no sound device; GPAC
decodes and plays out in real time) with ``-log-utc``, over MPTCP through
``mptcpize run``; over h2/h3 with ``-broken-cert`` (our certificate is
issued at run time) and, for h3, ``-h3=only`` (both need a GPAC built with
nghttp2 / ngtcp2: untested here). The command depends on the version
(:func:`.gpac.gpac_version`): GPAC 1.0.x (Debian bullseye's, what
``setup.sh`` installs on bookworm) gets its older command line and draws
video into a private Xvfb (:func:`.gpac.virtual_display`). Its HOME and
HTTP cache (``-cache``) are a private temporary folder, removed at the end. Its log goes to
``gpac.log`` in ``--out`` and is parsed (:func:`.gpac.parse_gpac_log`) into
``segments.csv``, ``abr_decisions.csv`` and ``qoe.json``: ``-log-utc`` times
(ms since the epoch) moved onto the run clock. ``t_first_byte`` is not in
GPAC's log (empty cells). SIGTERM stops GPAC and writes what it played.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from nest_experiments.dash import players
from nest_experiments.dash.content.mpd import parse_mpd
from nest_experiments.dash.core import qoe
from nest_experiments.dash.players import gpac
from nest_experiments.dash.players.playerargs import PlayerArgs
from nest_experiments.errors import MissingToolError, NestExpError, RunError
from nest_experiments.rundir import DECISIONS, GPAC_LOG, QOE, SEGMENTS, write_atomic
from nest_experiments.rundir.rows import DecisionRow, SegmentRow, write_decisions, write_segments

_FIRST_UTC = re.compile(r"UTC \S+ \(TS (\d+)\) - ")
STOP_GRACE_S = 5.0


def gpac_argv(*, binary: str, transport: str, url: str, algo: str, max_buffer_s: float, threshold_s: float,
              mptcpize: str | None = None, legacy: bool = False, cache_dir: Path | None = None) -> list[str]:
    """The whole command: GPAC's player line (README's verified one), MPTCP through mptcpize, TLS options;
    ``cache_dir``: GPAC's HTTP cache (the player's private folder, not GPAC's default /tmp/gpac_cache)."""
    buffer_ms = round(min(max_buffer_s, 2 * threshold_s) * 1000)
    extra = ["-broken-cert"] if transport in ("h2", "h3") else []
    if transport == "h3":
        extra.append("-h3=only")
    argv = gpac.gpac_command(url, algo=algo, max_buffer_ms=round(max_buffer_s * 1000),
                             rebuffer_ms=round(threshold_s * 1000), buffer_ms=buffer_ms, binary=binary, legacy=legacy,
                             cache_dir=None if cache_dir is None else str(cache_dir), extra=extra)
    if transport == "mptcp":
        if mptcpize is None:
            raise MissingToolError(players.MPTCPIZE_HINT)
        argv = [mptcpize, "run", *argv]
    return argv


def mpd_url(transport: str, server: str, port: int) -> str:
    return f"{'http' if transport in ('tcp', 'mptcp') else 'https'}://{server}:{port}/manifest.mpd"


def run_clock_shift(text: str, *, wall_minus_mono: float, t0: float) -> float | None:
    """What to add to the parser's times (seconds since the log's first ``-log-utc`` stamp) for the run clock."""
    match = _FIRST_UTC.search(text)
    return None if match is None else int(match.group(1)) / 1000 - wall_minus_mono - t0


def shifted(rows: list[SegmentRow], shift: float | None) -> list[SegmentRow]:
    """Rows on the run clock (no ``-log-utc`` stamp: times unknown, left empty)."""

    def move(t: float | None) -> float | None:
        return None if t is None or shift is None else t + shift

    return [replace(r, t_request=move(r.t_request), t_first_byte=move(r.t_first_byte), t_last_byte=move(r.t_last_byte))
            for r in rows]


def decisions(log: gpac.GpacLog, shift: float | None, algo: str) -> list[DecisionRow]:
    """GPAC's ``BBA-0:``/``BOLA:`` lines as decision rows (grate prints none); ``index`` is GPAC's counter."""
    return [DecisionRow(t=(d.t or 0.0) + (shift or 0.0), stream=d.stream, index=d.segment_number,
                                algorithm=f"gpac:{algo}", buffer_s=d.buffer_s, throughput_bps=None, level=d.quality,
                                bitrate_bps=d.rate_bps)
            for d in log.decisions if d.stream is not None]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # --abr: our name of a GPAC twin (grate, bba) or GPAC's algo
    p = PlayerArgs.parser(prog="python -m nest_experiments.dash.players.gpacplayer", description=__doc__,
                          transports=players.TRANSPORTS["gpac"], max_duration_s=600.0)
    p.add_argument("--mpd-file", type=Path, required=True)
    return PlayerArgs.from_argv(argv, p)[1]


def gpac_environment(home: Path, display: str | None = None) -> dict[str, str]:
    """SDL's dummy drivers, and a private HOME: GPAC writes ~/.gpac (a credential key) even with -p=0;
    ``display``: the X server of GPAC 1.0.x's video output."""
    env = {**gpac.gpac_env(), "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home)}
    return env if display is None else {**env, "DISPLAY": display}


def run_gpac(argv: list[str], log: Path, deadline: float, home: Path, display: str | None = None) -> str:
    """Run GPAC until it ends, the deadline passes, or we get SIGTERM; return how it ended."""
    stopped = {"term": False}
    signal.signal(signal.SIGTERM, lambda *_: stopped.update(term=True))
    with log.open("wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                env=gpac_environment(home, display))
    while proc.poll() is None and not stopped["term"] and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return "stopped" if stopped["term"] else "max_duration"
    return "ended" if proc.returncode == 0 else f"gpac exited {proc.returncode}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from nest_experiments.dash.players.client import wait_for_go

    try:
        binary = gpac.find_gpac()
        home = Path(tempfile.mkdtemp(prefix="gpac-home-"))
        cache_existed = gpac.DEFAULT_CACHE.exists()
        try:
            version = gpac.gpac_version(binary, gpac_environment(home))
            command = gpac_argv(binary=binary, transport=args.transport,
                                url=mpd_url(args.transport, args.server, args.port), algo=players.gpac_algo(args.abr),
                                max_buffer_s=args.max_buffer, threshold_s=args.threshold,
                                mptcpize=shutil.which("mptcpize"), legacy=version.legacy, cache_dir=home / "cache")
            with gpac.virtual_display() if version.legacy else nullcontext() as display:
                t0 = wait_for_go(args.go_file) if args.go_file is not None else (
                    args.t0 if args.t0 is not None else time.monotonic())
                wall_minus_mono = time.time() - time.monotonic()
                args.out.mkdir(parents=True, exist_ok=True)
                end = run_gpac(command, args.out / GPAC_LOG, t0 + args.max_duration, home, display)
        finally:
            shutil.rmtree(home, ignore_errors=True)
            gpac.remove_default_cache(cache_existed)
        text = (args.out / GPAC_LOG).read_text(errors="replace")
        manifest = parse_mpd(args.mpd_file.read_text())
        log = gpac.parse_gpac_log(text, manifest, transport=args.transport, starving=version.legacy)
        shift = run_clock_shift(text, wall_minus_mono=wall_minus_mono, t0=t0)
        rows = shifted(list(log.segments), shift)
        if not rows:
            raise RunError(f"GPAC received no media segment ({end}; see {args.out}/gpac.log)")
        write_outputs(args, rows, decisions(log, shift, players.gpac_algo(args.abr)), log, end=end,
                      version=version.line, command=command)
    except NestExpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"segments": len(rows), "end_reason": end}), flush=True)
    return 0


def write_outputs(args: argparse.Namespace, rows: list[SegmentRow], choices: list[DecisionRow],
                  log: gpac.GpacLog, *, end: str, version: str, command: list[str]) -> None:
    write_segments(args.out / SEGMENTS, rows)
    write_decisions(args.out / DECISIONS, choices)
    summary = qoe.summarize(rows, threshold_s=args.threshold)
    doc: dict[str, Any] = {
        "transport": args.transport, "player": "gpac", "client": f"gpac ({version})",
        "abr": args.abr, "gpac_algo": players.gpac_algo(args.abr), "command": command, "end_reason": end,
        "stalls": len(log.stalls), "underflows": log.underflows,
        "qoe": {name: asdict(s) for name, s in summary.items()},
    }
    write_atomic(args.out / QOE, json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
