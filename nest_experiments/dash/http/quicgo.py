"""HTTP/3 through quic-go: ``h3_client = "quic-go"``.

A Python QUIC stack spends CPU per packet in the interpreter; in the TCG guest
that alone can cap a session near the top of a ladder. This fetcher hands the
requests to ``nest-h3get`` (``native/h3get``, quic-go, the stack of the
paper's server; ``./setup.sh`` builds it into the venv's ``bin``), a child
process in the player's namespace that holds one QUIC connection and runs one
stream per request. Requests go down its stdin (``ID PATH KEEP``: KEEP -1
returns the whole body, the MPD's, N the first N bytes, a segment's boxes for
:mod:`~nest_experiments.dash.content.mp4`), results
come back as JSON lines with ``CLOCK_MONOTONIC`` times, which are converted to
the caller's clock (``time.monotonic()`` minus a constant, as the player's is).
The child dies with the player (``PR_SET_PDEATHSIG``) and ends at the end of
its input.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from nest_experiments.dash.content.mp4 import HEAD_BYTES
from nest_experiments.dash.core.fetch import Fetcher, FetchResult
from nest_experiments.errors import MissingToolError, RunError

BINARY = "nest-h3get"
ENV_BINARY = "NEST_EXP_H3GET"  # path of the binary, to test another build
PR_SET_PDEATHSIG = 1
LINE_LIMIT = 64 * 1024 * 1024  # a result line carries the MPD's body


def binary() -> Path:
    """The fetcher binary: ``$NEST_EXP_H3GET``, or the one ``./setup.sh`` built beside this venv's Python."""
    path = Path(os.environ.get(ENV_BINARY) or Path(sys.executable).parent / BINARY)
    if not os.access(path, os.X_OK):
        raise MissingToolError(f"h3_client 'quic-go': {path} not found; run ./setup.sh, which builds it from "
                               "native/h3get with Go >= 1.26 (go.dev/dl; Debian 12's golang is too old), "
                               "or use h3_client = 'qh3'")  # fmt: skip
    return path


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class QuicGoFetcher(Fetcher):
    """HTTP/3 over one quic-go connection in a child process; one stream per request."""

    def __init__(self, *, proc: asyncio.subprocess.Process, offset: float, implementation: str,
                 connect_url: str) -> None:
        self.proc, self.offset, self.implementation = proc, offset, implementation
        self.connect_url = connect_url
        self._next = 0
        self._pending: dict[int, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, host: str, port: int, *, clock: Any, ca: Path | None, insecure: bool,
                   server_name: str | None, window: int, connect_timeout: float,
                   idle_timeout: float, qlog: Path | None = None) -> QuicGoFetcher:
        """``qlog``: the file for the connection's recovery events (``-qlog``: nest_experiments.parsers.qlog)."""
        argv = [str(binary()), "-host", host, "-port", str(port), "-window", str(window),
                "-connect-timeout", f"{connect_timeout}s", "-idle-timeout", f"{idle_timeout}s"]
        if qlog is not None:
            argv += ["-qlog", str(qlog)]
        if server_name:
            argv += ["-server-name", server_name]
        if insecure:
            argv.append("-insecure")
        elif ca is not None:
            argv += ["-ca", str(ca)]
        offset = time.monotonic() - clock()
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT,
                                                    preexec_fn=_die_with_parent)  # fmt: skip
        assert proc.stdout is not None
        url = f"https://{host}:{port}/"
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), connect_timeout + 5.0)
            first = json.loads(line) if line else {"error": f"{BINARY} exited {await proc.wait()}"}
        except (TimeoutError, ValueError) as exc:
            first = {"error": f"no answer from {BINARY} ({exc or 'timed out'})"}
        if "ready" not in first:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise RunError(f"h3 {url}: {first.get('error')}")
        return cls(proc=proc, offset=offset, implementation=str(first["ready"]), connect_url=url)

    async def _read(self) -> None:
        """Hand each result line to its request; when the child ends, fail the requests still waiting. A line
        the child did not finish (killed while writing it: its last line has no newline) is not a result: the
        requests waiting learn that the child is gone, instead of waiting for ever."""
        assert self.proc.stdout is not None
        cut = ""
        while line := await self.proc.stdout.readline():
            try:
                doc = json.loads(line) if line.endswith(b"\n") else None
            except ValueError:
                doc = None
            if not isinstance(doc, dict):
                cut = f" after an unreadable line ({len(line)} bytes: {line[:60]!r})"
                break
            entry = self._pending.pop(int(doc.get("id", -1)), None)
            if entry is not None and not entry[1].done():
                entry[1].set_result(doc)
        if cut:  # it may still be writing: stop it, or wait() would wait on a full pipe
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        code = await self.proc.wait()
        for _path, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(RunError(f"h3 {self.connect_url}: {BINARY} exited {code}{cut}"))
        self._pending.clear()

    async def fetch(self, stream: str, path: str) -> FetchResult:
        if any(c.isspace() for c in path):
            raise RunError(f"h3 {self.connect_url}: a path with white space cannot be requested: {path!r}")
        if self._reader.done():
            raise RunError(f"h3 {self.connect_url}{path.lstrip('/')}: {BINARY} is gone")
        self._next += 1
        rid, fut = self._next, asyncio.get_running_loop().create_future()
        self._pending[rid] = (path, fut)
        whole = path.split("?")[0].endswith(".mpd")
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(f"{rid} {path} {-1 if whole else HEAD_BYTES}\n".encode())
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            self._pending.pop(rid, None)
            raise RunError(f"h3 {self.connect_url}{path.lstrip('/')}: {BINARY} is gone ({exc})") from exc
        doc = await fut
        if doc.get("error"):
            raise RunError(f"h3 {self.connect_url}{path.lstrip('/')}: {doc['error']}")
        body = base64.b64decode(doc.get("body", ""))
        return FetchResult(path=path, status=int(doc["status"]), bytes=int(doc["bytes"]),
                           t_request=doc["t_request"] - self.offset, t_first_byte=doc["t_first"] - self.offset,
                           t_last_byte=doc["t_last"] - self.offset, transport="h3",
                           body=body if whole else None, head=b"" if whole else body)  # fmt: skip

    async def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 2.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
