"""DASH client process: play one MPD over one transport, write the session's records.

    python -m nest_experiments.dash.players.client --server ADDR --port N --transport tcp|mptcp|h2|h3|race \
        --mpd /manifest.mpd --abr grate --abr-audio grate --max-buffer 10 --threshold 1 \
        (--t0 F | --go-file FILE) --out DIR [--max-duration S] [--ca FILE | --insecure] [--h3-client qh3|aioquic]

With ``--transport race`` (QUIC/TCP connection racing, :mod:`~nest_experiments.dash.http.race`; ``--racing``
chromium|firefox|quic_only|tcp_only|dynamic, ``--racing-params JSON``) it also
writes ``racing.csv`` (:mod:`~nest_experiments.dash.core.racing_log`), even when the session failed.
Writes ``segments.csv`` and ``abr_decisions.csv`` (:mod:`nest_experiments.rundir.rows`)
and ``qoe.json`` (:func:`nest_experiments.dash.core.qoe.summarize` plus the end
reason) into ``DIR``. Every time is ``time.monotonic() - t0``: the run's
clock, shared by every namespace (one CLOCK_MONOTONIC per kernel). Errors
are one line on stderr (``error: ...``) and a non-zero exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nest_experiments.dash.core import qoe, racing, records
from nest_experiments.dash.core.abandon import DASHJS_INITIAL_BPS, AbandonRule
from nest_experiments.dash.core.abr.base import DEFAULT_ABR
from nest_experiments.dash.core.fetch import Fetcher
from nest_experiments.dash.core.player import PlayerReport, play
from nest_experiments.dash.http import httpcache
from nest_experiments.dash.http.race import RaceFetcher
from nest_experiments.dash.http.transports import (
    H3_CLIENTS,
    KINDS,
    PY_QUIC_STACKS,
    FetcherOptions,
    open_fetcher,
    quic_stack,
)
from nest_experiments.dash.players.playerargs import PlayerArgs
from nest_experiments.errors import ConfigError, NestExpError, RunError
from nest_experiments.rundir import DECISIONS, QOE, RACING, SEGMENTS, write_atomic
from nest_experiments.rundir.rows import write_decisions, write_racing, write_segments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # --transport race: QUIC/TCP connection racing (h2 over TLS on --port, h3 where alt-svc says), see --racing
    p = PlayerArgs.parser(prog="python -m nest_experiments.dash.players.client", description=__doc__,
                          transports=(*KINDS, "race"))
    p.add_argument("--racing", choices=racing.POLICIES, default="chromium", help="the race transport's policy")
    p.add_argument("--racing-params", type=json.loads, default={},
                   help='the policy\'s numbers as JSON, e.g. {"idle_timeout_s": 29} (dash.racing.RacingParams)')
    p.add_argument("--mpd", required=True, help="URL path of the MPD, e.g. /manifest.mpd")
    p.add_argument("--abr-audio", default=DEFAULT_ABR, help="audio ABR algorithm")
    p.add_argument("--level", type=int, default=0, help="the level of ABR 'fixed' (0-based index)")
    p.add_argument("--insecure", action="store_true", help="do not verify the h2/h3 certificate")
    p.add_argument("--h3-client", choices=H3_CLIENTS, default=H3_CLIENTS[0], help="QUIC stack of the h3 transport")
    p.add_argument("--quic-log", type=Path, help="h3: the connection's recovery events to FILE (quic-go: its qlog; "
                                                 "aioquic: quic.csv rows; qh3 logs none)")
    p.add_argument("--prelude", action="append", default=[], metavar="PATH",
                   help="fetch this URL path before the MPD (repeatable), e.g. the dash.js page and its script")
    p.add_argument("--initial-bitrate", choices=("abr", "dashjs"), default="abr",
                   help="dashjs: each stream's first segment at the level of dash.js's initial bitrate (1000 kbit/s "
                        "video, 100 kbit/s audio); abr: the ABR's choice")
    p.add_argument("--schedule", choices=("buffer", "dashjs"), default="buffer",
                   help="dashjs: audio asked only while its buffer is below video's + 1 s (dash.js's audio buffer "
                        "target); buffer: every stream up to --max-buffer")
    p.add_argument("--fast-switch", choices=("none", "dashjs"), default="none",
                   help="dashjs: on a level change, replace the buffered segment under the playhead (and the ones "
                        "after it) when it was downloaded at a lower bitrate (dash.js's fast switch)")
    p.add_argument("--http-cache", choices=httpcache.MODES, default="none",
                   help="browser: answer a request for a URL already fetched from memory while its response is "
                        "fresh (cache-control max-age), as a browser's HTTP cache does (dash.httpcache)")
    p.add_argument("--abandon", choices=("none", "dashjs"), default="none",
                   help="dashjs: abandon slow media requests by dash.js's AbandonRequestsRule (dash.abandon)")
    p.add_argument("--idle-timeout", type=float, default=FetcherOptions.idle_timeout, metavar="SECONDS",
                   help="fail when a response sends no byte for this long (a browser's XHR without a timeout waits "
                        "as long as the session: give the session's length)")
    return PlayerArgs.from_argv(argv, p)[1]


CLOSE_TIMEOUT_S = 5.0


async def run(args: argparse.Namespace) -> PlayerReport:
    t0 = time.monotonic() if args.t0 is None else args.t0

    def clock() -> float:
        return time.monotonic() - t0

    fetcher: Fetcher
    if args.transport == "race":
        try:
            params = racing.params_from(args.racing_params)
        except (ConfigError, ValueError, TypeError) as exc:
            raise ConfigError("--racing-params", str(exc)) from None
        args.racer = racing.Racer(policy=args.racing, params=params)
        opts = FetcherOptions(clock=clock, ca=args.ca, insecure=args.insecure, h3_client=args.h3_client,
                              idle_timeout=args.idle_timeout)
        fetcher = RaceFetcher(host=args.server, port=args.port, racer=args.racer, opts=opts)
    else:
        quicgo = args.h3_client == "quic-go"  # its qlog; aioquic's own recovery rows (quic.csv's columns)
        fetcher = await open_fetcher(args.transport, args.server, args.port, clock=clock, ca=args.ca,
                                     insecure=args.insecure, h3_client=args.h3_client, idle_timeout=args.idle_timeout,
                                     qlog=args.quic_log if quicgo else None,
                                     recovery_log=args.quic_log if args.h3_client == "aioquic" else None)
    if args.transport == "h3":  # H3Fetcher or quicgo.QuicGoFetcher
        args.implementation = fetcher.implementation  # type: ignore[attr-defined]
    if args.http_cache == "browser":
        fetcher = httpcache.CachingFetcher(fetcher, clock=clock)
    task = asyncio.current_task()
    if task is not None:  # SIGTERM (the runner's deadline): end the session and write what was played
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await play(args.mpd, fetcher, abr=args.abr, abr_audio=args.abr_audio, fixed_level=args.level,
                          max_buffer_s=args.max_buffer, abandon=AbandonRule() if args.abandon == "dashjs" else None,
                          threshold_s=args.threshold, clock=clock, max_duration_s=args.max_duration,
                          prelude=tuple(args.prelude), initial_bps=DASHJS_INITIAL_BPS if args.initial_bitrate == "dashjs" else None,
                          schedule=args.schedule, fast_switch=args.fast_switch == "dashjs")
    finally:
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, OSError):
            await asyncio.wait_for(fetcher.close(), CLOSE_TIMEOUT_S)


def qoe_document(report: PlayerReport, *, transport: str, threshold_s: float,
                 client: str = "") -> dict[str, Any]:
    """``qoe.json``: QoE per stream and session, how the session ended, and the client's implementation."""
    summary = qoe.summarize(report.segments, startup_delay_s=report.startup_delay_s, threshold_s=threshold_s,
                            stall_at_end=report.stall_at_end)
    return {
        "transport": transport,
        "client": client,
        "end_reason": report.end_reason,
        "ended_at": report.ended_at,
        "stalls": len(report.stalls) + (report.stall_at_end is not None),
        "abandoned": records.abandoned(report.decisions),
        "stall_at_end": None if report.stall_at_end is None else report.stall_at_end.as_dict(),
        "qoe": {name: asdict(s) for name, s in summary.items()},
    }


def write_outputs(out: Path, report: PlayerReport, *, transport: str, threshold_s: float, client: str = "") -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_segments(out / SEGMENTS, report.segments)
    write_decisions(out / DECISIONS, report.decisions)
    doc = qoe_document(report, transport=transport, threshold_s=threshold_s, client=client)
    write_atomic(out / QOE, json.dumps(doc, indent=2) + "\n")


def warm(args: argparse.Namespace) -> None:
    """Import what the session imports lazily (the QUIC stack of ``h3`` and ``race``) before saying ready: in the
    TCG guest qh3's import alone took ~0.45 s of CPU, which put the player's first second after the go at 93-97 %
    of a CPU (and past the saturation rule in 3 of 6 HTTP/3 sessions of h2quic_adaptation)."""
    if args.transport in ("h3", "race") and args.h3_client in PY_QUIC_STACKS:
        quic_stack(args.h3_client)


def wait_for_go(path: Path, poll_s: float = 0.02) -> float:
    """Say we are ready (imports done), then wait for the runner's go file; return its t0."""
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    while True:
        try:
            return float(json.loads(path.read_text())["t0"])
        except (OSError, ValueError, KeyError):
            time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warm(args)
    if args.go_file is not None:
        args.t0 = wait_for_go(args.go_file)
    try:
        try:
            report = asyncio.run(run(args))
        finally:
            if getattr(args, "racer", None) is not None:  # the race's events, even of a session that failed
                args.out.mkdir(parents=True, exist_ok=True)
                write_racing(args.out / RACING, args.racer.rows)
        if not report.segments:
            raise RunError(f"no segment was received ({report.end_reason})")
        write_outputs(args.out, report, transport=args.transport, threshold_s=args.threshold,
                      client=getattr(args, "implementation", "nest_experiments"))
    except NestExpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except OSError as exc:
        print(f"error: dash client: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"segments": len(report.segments), "end_reason": report.end_reason}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
