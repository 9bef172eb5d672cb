"""Object downloads: timed sessions of HTTP requests for objects of seeded random sizes (a CLI of its own).

The "under the hood" micro-benchmarks of the ABR-over-QUIC paper
(Under the hood, docs/papers.md), usable against any HTTP server:

- ``sequential``: a session is ``requests`` GETs one after another, each for
  an object whose size is drawn uniformly from ``[size_min, size_max]``,
  with ``pause`` between the end of one response and the next request (the
  paper: 2-50 MB, 40 requests, 500 ms, 3 sessions per transport);
- ``parallel``: ``streams`` (2) concurrent request loops, each its own
  sizes and pauses (the paper: 1-8 MB, pause 0.5-8 s), over the transport's
  connections: two TCP connections for ``tcp`` (one per stream, as
  :class:`~nest_experiments.dash.http.transports.Http1Fetcher` keeps them), ONE
  QUIC connection for ``h3`` (one QUIC stream per request).

Every session opens fresh connections. The schedule (:func:`schedule`) is
pure: the same design and seed give the same sizes and pauses. Object
``N`` bytes is served as ``/obj-N.bin`` (:func:`object_name`);
:func:`make_files` creates them as sparse files (``files`` below).

Per object (:data:`FIELDS`): ``size``, ``stream``, ``t_request``,
``t_first_byte``, ``t_last_byte`` on the caller's clock (the run clock:
``--t0``), ``throughput_bps`` = 8 x bytes / (last - first byte) and
``latency_s`` = first byte - request (the paper's "response latency").

    python -m nest_experiments.apps.objects_client plan  [DESIGN]             # the schedule, one JSON line per request
    python -m nest_experiments.apps.objects_client files DIR [DESIGN]         # the object files it needs, sparse
    python -m nest_experiments.apps.objects_client fetch --kind tcp|mptcp|h2|h3 --host H --port P [DESIGN] --out objects.csv

DESIGN: ``--mode sequential|parallel --requests N --sizes 2mb:50mb
--pause 500ms`` (or a range ``500ms:8s``, drawn per request) ``--streams N
--sessions N --seed N``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nest_experiments.dash.core.fetch import Clock, Fetcher, FetchResult
from nest_experiments.errors import ConfigError, NestExpError, RunError
from nest_experiments.rundir.rows import write_rows as write_csv

MODES = ("sequential", "parallel")
SIZE_QUANTUM = 1024  # sizes are whole KiB (fewer distinct files, readable names)
FIELDS = ("session", "stream", "index", "path", "size", "status", "bytes", "t_request", "t_first_byte",
          "t_last_byte", "throughput_bps", "latency_s", "transport")


@dataclass(frozen=True, kw_only=True)
class Design:
    """What a session downloads: how many objects per stream, their sizes, the pauses, how many sessions."""

    mode: str = "sequential"
    requests: int = 40  # per stream and session
    size_min: int = 2 * 1024**2  # bytes
    size_max: int = 50 * 1024**2
    pause_min_s: float = 0.5  # between a response's last byte and the stream's next request
    pause_max_s: float = 0.5  # == pause_min_s: a fixed pause
    streams: int = 1  # concurrent request loops (parallel: 2)
    sessions: int = 1  # one after another, each over fresh connections
    seed: int = 1

    def __post_init__(self) -> None:
        check_design(self)


def check_design(d: Design) -> None:
    """Refuse a design that cannot run, naming the setting (ConfigError)."""
    if d.mode not in MODES:
        raise ConfigError("mode", f"unknown mode {d.mode!r}; expected one of {MODES}")
    if not 0 < d.size_min <= d.size_max:
        raise ConfigError("sizes", f"expected 0 < min <= max bytes, got {d.size_min}..{d.size_max}")
    if not 0 <= d.pause_min_s <= d.pause_max_s:
        raise ConfigError("pause", f"expected 0 <= min <= max seconds, got {d.pause_min_s:g}..{d.pause_max_s:g}")
    if d.requests < 1 or d.sessions < 1:
        raise ConfigError("requests" if d.requests < 1 else "sessions", "expected at least 1")
    if (d.mode == "parallel") != (d.streams >= 2):
        raise ConfigError("streams", f"mode {d.mode!r} with {d.streams} stream(s): sequential has 1, parallel >= 2")


@dataclass(frozen=True, kw_only=True)
class ObjectRequest:
    """One planned GET: ``pause_s`` is waited on its stream before it is sent (0 for a stream's first)."""

    session: int
    stream: str
    index: int
    size: int
    pause_s: float

    @property
    def path(self) -> str:
        return "/" + object_name(self.size)


def object_name(size: int) -> str:
    return f"obj-{size}.bin"


def stream_names(d: Design) -> tuple[str, ...]:
    return ("objects",) if d.streams == 1 else tuple(f"s{i + 1}" for i in range(d.streams))


def _draw_size(rng: random.Random, d: Design) -> int:
    lo, hi = -(-d.size_min // SIZE_QUANTUM), d.size_max // SIZE_QUANTUM
    return max(d.size_min, min(d.size_max, rng.randint(lo, max(lo, hi)) * SIZE_QUANTUM))


def _stream_plan(d: Design, session: int, stream: str) -> list[ObjectRequest]:
    rng = random.Random(f"{d.seed}/{session}/{stream}")  # a str seed is stable across processes and versions
    out = []
    for i in range(d.requests):
        size = _draw_size(rng, d)
        pause = rng.uniform(d.pause_min_s, d.pause_max_s) if d.pause_max_s > d.pause_min_s else d.pause_min_s
        out.append(ObjectRequest(session=session, stream=stream, index=i, size=size, pause_s=pause if i else 0.0))
    return out


def schedule(d: Design) -> list[ObjectRequest]:
    """Every request of the design: sessions in order, each stream's requests in order (pure, seeded)."""
    return [r for s in range(1, d.sessions + 1) for name in stream_names(d) for r in _stream_plan(d, s, name)]


def sizes_needed(d: Design) -> list[int]:
    return sorted({r.size for r in schedule(d)})


def make_files(folder: Path, sizes: Sequence[int]) -> list[Path]:
    """One sparse file per size in ``folder`` (zeros; no disk blocks), named :func:`object_name`."""
    out = []
    for size in sizes:
        path = folder / object_name(size)
        with path.open("wb") as fh:
            fh.truncate(size)
        out.append(path)
    return out


# ---------------------------------------------------------------- metrics (pure)


def object_row(req: ObjectRequest, res: FetchResult) -> dict[str, Any]:
    """One :data:`FIELDS` row: throughput over first -> last byte, response latency = first byte - request."""
    span = res.t_last_byte - res.t_first_byte
    return {"session": req.session, "stream": req.stream, "index": req.index, "path": res.path, "size": req.size,
            "status": res.status, "bytes": res.bytes, "t_request": round(res.t_request, 6),
            "t_first_byte": round(res.t_first_byte, 6), "t_last_byte": round(res.t_last_byte, 6),
            "throughput_bps": round(8 * res.bytes / span, 1) if span > 0 else "",
            "latency_s": round(res.t_first_byte - res.t_request, 6), "transport": res.transport}


# ---------------------------------------------------------------- running (I/O through a Fetcher)

OpenFetcher = Callable[[], Awaitable[Fetcher]]


@dataclass
class Progress:
    rows: list[dict[str, Any]]
    stop_at: float  # clock(): no new request after this
    skipped: int = 0


async def _run_stream(fetcher: Fetcher, reqs: Sequence[ObjectRequest], clock: Clock, prog: Progress,
                      on_row: Callable[[dict[str, Any]], None]) -> None:
    for n, req in enumerate(reqs):
        await asyncio.sleep(req.pause_s)
        if clock() >= prog.stop_at:
            prog.skipped += len(reqs) - n
            return
        res = await fetcher.fetch(req.stream, req.path)
        if res.status != 200 or res.bytes != req.size:
            raise RunError(f"{req.path}: HTTP {res.status}, {res.bytes} of {req.size} bytes")
        prog.rows.append(object_row(req, res))
        on_row(prog.rows[-1])


async def run_design(d: Design, open_fetcher: OpenFetcher, *, clock: Clock, prog: Progress,
                     on_row: Callable[[dict[str, Any]], None] = lambda row: None) -> Progress:
    """Every session of ``d``, each over a fetcher of its own, into ``prog`` (which keeps the rows so far if it
    fails); no request is sent after ``prog.stop_at``."""
    plan = schedule(d)
    for session in range(1, d.sessions + 1):
        if session > 1:
            await asyncio.sleep(d.pause_min_s)
        if clock() >= prog.stop_at:
            prog.skipped += sum(1 for r in plan if r.session >= session)
            break
        fetcher = await open_fetcher()
        try:
            jobs = [_run_stream(fetcher, [r for r in plan if (r.session, r.stream) == (session, s)], clock, prog,
                                on_row) for s in stream_names(d)]
            await asyncio.gather(*jobs)
        finally:
            await fetcher.close()
    return prog


# ---------------------------------------------------------------- CLI


def _size_range(text: str) -> tuple[int, int]:
    from nest_experiments.units import parse_size

    lo, _, hi = text.partition(":")
    return parse_size("--sizes", lo), parse_size("--sizes", hi or lo)


def _time_range(text: str) -> tuple[float, float]:
    from nest_experiments.units import parse_time

    lo, _, hi = text.partition(":")
    return parse_time("--pause", lo), parse_time("--pause", hi or lo)


def _design_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=MODES, default="sequential")
    p.add_argument("--requests", type=int, default=40, help="requests per stream and session (default 40)")
    p.add_argument("--sizes", default="2mb:50mb", help="object sizes MIN:MAX, drawn uniformly (default 2mb:50mb)")
    p.add_argument("--pause", default="500ms", help="pause before each next request: T, or MIN:MAX drawn uniformly")
    p.add_argument("--streams", type=int, help="concurrent streams (default: 1 sequential, 2 parallel)")
    p.add_argument("--sessions", type=int, default=1, help="sessions one after another, fresh connections each")
    p.add_argument("--seed", type=int, default=1)


def design_of(args: argparse.Namespace) -> Design:
    (smin, smax), (pmin, pmax) = _size_range(args.sizes), _time_range(args.pause)
    streams = args.streams if args.streams is not None else (2 if args.mode == "parallel" else 1)
    return Design(mode=args.mode, requests=args.requests, size_min=smin, size_max=smax, pause_min_s=pmin,
                  pause_max_s=pmax, streams=streams, sessions=args.sessions, seed=args.seed)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m nest_experiments.apps.objects_client", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    _design_args(sub.add_parser("plan", help="print the schedule (one JSON line per request)"))
    files = sub.add_parser("files", help="create the object files of the schedule (sparse) in DIR")
    files.add_argument("dir", type=Path)
    _design_args(files)
    fetch = sub.add_parser("fetch", help="run the sessions against a server; one JSON line per object")
    _design_args(fetch)
    fetch.add_argument("--kind", choices=("tcp", "mptcp", "h2", "h3"), required=True)
    fetch.add_argument("--host", required=True)
    fetch.add_argument("--port", type=int, required=True)
    fetch.add_argument("--prefix", default="", help="URL path before the object names (e.g. /objects)")
    fetch.add_argument("--out", type=Path, help="write the rows to this CSV file")
    fetch.add_argument("--t0", type=float, help="time.monotonic() at the run's t = 0 (default: now)")
    fetch.add_argument("--max-duration", type=float, default=float("inf"), help="send no request after S seconds")
    fetch.add_argument("--ca", type=Path, help="CA certificate (PEM) for h2/h3")
    fetch.add_argument("--insecure", action="store_true", help="do not verify the certificate")
    fetch.add_argument("--h3-client", default="qh3", help="QUIC stack of h3: qh3, aioquic, quic-go")
    return p


class _Prefixed(Fetcher):
    def __init__(self, inner: Fetcher, prefix: str) -> None:
        self.inner, self.prefix = inner, prefix.rstrip("/")

    async def fetch(self, stream: str, path: str) -> FetchResult:
        return await self.inner.fetch(stream, self.prefix + path)

    async def close(self) -> None:
        await self.inner.close()


async def _fetch(args: argparse.Namespace, d: Design, clock: Clock, prog: Progress) -> Progress:
    from nest_experiments.dash.http.transports import open_fetcher

    async def opener() -> Fetcher:
        inner = await open_fetcher(args.kind, args.host, args.port, clock=clock, ca=args.ca, insecure=args.insecure,
                                   h3_client=args.h3_client)
        return _Prefixed(inner, args.prefix)

    return await run_design(d, opener, clock=clock, prog=prog, on_row=lambda row: print(json.dumps(row), flush=True))


def _write(out: Path, rows: Sequence[dict[str, Any]]) -> None:
    write_csv(out, FIELDS, (tuple(r[f] for f in FIELDS) for r in rows))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        d = design_of(args)
        if args.command == "plan":
            for req in schedule(d):
                print(json.dumps({**asdict(req), "path": req.path}))
        elif args.command == "files":
            print(json.dumps({"files": len(make_files(args.dir, sizes_needed(d))), "dir": str(args.dir)}))
        else:
            return _fetch_main(args, d)
    except NestExpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _fetch_main(args: argparse.Namespace, d: Design) -> int:
    t0 = time.monotonic() if args.t0 is None else args.t0

    def clock() -> float:
        return time.monotonic() - t0

    prog = Progress(rows=[], stop_at=clock() + args.max_duration)
    try:
        asyncio.run(_fetch(args, d, clock, prog))
    finally:  # the objects done so far, also when one failed
        if args.out is not None:
            _write(args.out, prog.rows)
    print(json.dumps({"summary": {"objects": len(prog.rows), "skipped": prog.skipped}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
