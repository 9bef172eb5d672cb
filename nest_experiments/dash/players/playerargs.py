"""The command line every DASH player process takes: ours (:mod:`.client`), dash.js (:mod:`.browser`) and GPAC
(:mod:`.gpacplayer`), written by the dash app (apps.dash) with :meth:`PlayerArgs.to_argv` and read by each
player through :meth:`PlayerArgs.parser` (each adds its own options) and :meth:`PlayerArgs.from_argv`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nest_experiments.dash.core.abr.base import DEFAULT_ABR


@dataclass(frozen=True, kw_only=True)
class PlayerArgs:
    """One DASH session of a player: where the server is, how to adapt and buffer, when to start, where to write."""

    server: str
    port: int
    transport: str
    out: Path  # segments.csv, abr_decisions.csv, qoe.json
    abr: str = DEFAULT_ABR
    max_buffer_s: float = 10.0
    threshold_s: float = 1.0  # seconds of media to start or resume playback
    t0: float | None = None  # time.monotonic() at the run's t = 0 (default: now, or the go file's)
    go_file: Path | None = None  # say ready, wait for this JSON file, take "t0" from it
    max_duration_s: float | None = None
    ca: Path | None = None  # the server's certificate (PEM) over h2/h3/race

    def to_argv(self) -> list[str]:
        argv = ["--server", self.server, "--port", str(self.port), "--transport", self.transport,
                "--abr", self.abr, "--max-buffer", f"{self.max_buffer_s:g}", "--threshold", f"{self.threshold_s:g}",
                "--out", str(self.out)]
        if self.t0 is not None:
            argv += ["--t0", repr(self.t0)]
        if self.go_file is not None:
            argv += ["--go-file", str(self.go_file)]
        if self.max_duration_s is not None:
            argv += ["--max-duration", f"{self.max_duration_s:g}"]
        if self.ca is not None:
            argv += ["--ca", str(self.ca)]
        return argv

    @staticmethod
    def parser(*, prog: str, description: str | None, transports: Sequence[str], abrs: Sequence[str] | None = None,
               default_abr: str = DEFAULT_ABR, max_duration_s: float | None = None) -> argparse.ArgumentParser:
        """An argument parser with the shared options (a player adds its own); ``abrs``: the values it accepts
        (None: any, checked by the player); ``max_duration_s``: its default session cap."""
        p = argparse.ArgumentParser(prog=prog, description=description,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--server", required=True, help="server address")
        p.add_argument("--port", type=int, required=True, help="server port of the transport")
        p.add_argument("--transport", choices=tuple(transports), required=True)
        p.add_argument("--abr", choices=tuple(abrs) if abrs is not None else None, default=default_abr,
                       help="video ABR algorithm")
        p.add_argument("--max-buffer", type=float, default=10.0, help="seconds of media buffered at most")
        p.add_argument("--threshold", type=float, default=1.0, help="seconds of media to start/resume playback")
        p.add_argument("--out", type=Path, required=True, help="folder for segments.csv, abr_decisions.csv, qoe.json")
        p.add_argument("--t0", type=float, help="time.monotonic() at the run's t = 0 (default: now)")
        p.add_argument("--go-file", type=Path,
                       help='print {"ready": true}, wait until this JSON file exists, take "t0" from it, then play')
        p.add_argument("--max-duration", type=float, default=max_duration_s,
                       help="stop the session after this many seconds")
        p.add_argument("--ca", type=Path, help="the server's certificate (PEM) for h2/h3")
        return p

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> PlayerArgs:
        return cls(server=ns.server, port=ns.port, transport=ns.transport, out=ns.out, abr=ns.abr,
                   max_buffer_s=ns.max_buffer, threshold_s=ns.threshold, t0=ns.t0, go_file=ns.go_file,
                   max_duration_s=ns.max_duration, ca=ns.ca)

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None,
                  parser: argparse.ArgumentParser) -> tuple[PlayerArgs, argparse.Namespace]:
        """The shared options of ``argv`` (None: this process's) as a record, and every option (``parser``'s
        own too) as parsed."""
        ns = parser.parse_args(None if argv is None else list(argv))
        return cls.from_namespace(ns), ns
