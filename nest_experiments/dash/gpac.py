"""GPAC (26.07) as the DASH player: its command line and a parser for its log.

Formats and traps: ``tests/data/gpac/README.md``, beside the captured logs
that the tests parse. The parser is pure (text in, records out); it splits on ``\\r`` as well as ``\\n`` (buffer
progress lines end with ``\\r``), strips ANSI colours, and with ``-log-utc``
carries the last ``UTC ... (TS ms) -`` timestamp forward to the records that
follow a ``\\r`` without a prefix.

Per segment (``[DASH] AS#n got <file> stats: ...``) it fills the
``segments.csv`` schema as far as GPAC reports: stream (from the AS number),
index and level (from the file name, through the MPD's SegmentTemplate),
bitrate (the representation's bandwidth), bytes, buffer; with ``-log-utc``,
``t_last_byte`` is the line's time and ``t_request`` that minus the reported
download time (approximate: GPAC prints the line when dashin moves on, which
can be after the next download started). ``t_first_byte`` is never known.
Stalls come from ``[VideoOut]``/``[AudioOut]`` ``... rebuffering`` (start)
and ``rebuffer done in N ms`` (end, duration); the duration is written on the
last segment of that stream received before the end line.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from nest_experiments.dash.mpd import Manifest, Representation
from nest_experiments.dash.playerargs import DEFAULT_ABR
from nest_experiments.dash.records import SegmentRow
from nest_experiments.errors import ConfigError, MissingToolError

GPAC_HINT = (
    "gpac is not installed: gpac is not packaged for Debian; on Ubuntu: apt-get install gpac; "
    "or build from https://github.com/gpac/gpac"
)
GPAC_ALGOS = ("none", "grate", "gbuf", "bba0", "bolaf", "bolab", "bolau", "bolao")
DEFAULT_AS_STREAMS: Mapping[int, str] = {1: "audio", 2: "video"}  # MP4Box input order in the samples

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_UTC = re.compile(r"^UTC \S+ \(TS (\d+)\) - ")
_GOT = re.compile(
    r"^\[DASH\] AS#(\d+) got (\S+) stats: (\d+) bytes in (\S+) sec at (\d+) kbps - dur (\S+) sec"
    r" - bitrate: (\d+) \(avg (\d+)\) kbps - buffer (\d+) ms"
)
_QUALITY = re.compile(r"^\[DASH\] AS#(\d+) changed quality to bitrate (\d+) kbps")
_DECISION = re.compile(
    r"^\[DASH\] (BBA-0|BOLA): buffer (\d+) ms, segment number (\d+), new quality (\d+) with rate (\d+)"
)
_STALL = re.compile(r"^\[(Video|Audio)Out\] buffer (\d+) less than min threshold (\d+), rebuffering")
_STALL_EMPTY = re.compile(r"^\[(Video|Audio)Out\] buffer empty, rebuffering")
_DONE = re.compile(r"^\[(Video|Audio)Out\] rebuffer done in (\d+) ms")
_UNDERFLOW = re.compile(r"^\[(Video|Audio)Out\] buffer underflow")
_INSPECT_REBUF = re.compile(r"^\[Inspect\] PID \d+ rebuffering")
_NUMBER = re.compile(r"(\d+)(?=\D*$)")


@dataclass(frozen=True, kw_only=True)
class QualityChange:
    """``changed quality``: the rep picked for the next download (first per AS = initial)."""

    t: float | None
    adaptation_set: int  # GPAC's AS#, 1-based
    stream: str
    bitrate_kbps: int
    initial: bool


@dataclass(frozen=True, kw_only=True)
class GpacDecision:
    """A ``BBA-0:`` / ``BOLA:`` line (no AS#: the stream is resolved from the rate)."""

    t: float | None
    algorithm: str
    buffer_s: float
    segment_number: int
    quality: int
    rate_bps: int
    stream: str | None


@dataclass(frozen=True, kw_only=True)
class GpacStall:
    """One rebuffering of an output; ``duration_s`` None when it never ended."""

    stream: str
    t_start: float | None
    buffer_s: float
    threshold_s: float
    duration_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class GpacLog:
    """Everything parsed from one GPAC log."""

    segments: tuple[SegmentRow, ...]
    download_s: tuple[float, ...]  # per segment: GPAC's request-to-end time ("rtt" in NeST)
    quality_changes: tuple[QualityChange, ...]
    decisions: tuple[GpacDecision, ...]
    stalls: tuple[GpacStall, ...]
    underflows: dict[str, int]
    inspect_rebuffering: int  # headless inspect artefacts, not stalls


# ------------------------------------------------------------------- lines


def records(text: str) -> list[tuple[float | None, str]]:
    """Split into records (``\\r`` and ``\\n``), with the ``-log-utc`` time carried forward (s since first)."""
    out: list[tuple[float | None, str]] = []
    first: int | None = None
    current: float | None = None
    for raw in re.split(r"\r\n|\r|\n", _ANSI.sub("", text)):
        match = _UTC.match(raw)
        if match:
            ts = int(match.group(1))
            first = ts if first is None else first
            current = (ts - first) / 1000
            raw = raw[match.end() :]
        if raw.strip():
            out.append((current, raw.strip()))
    return out


# ------------------------------------------------------------------ parser


@dataclass
class _Parse:
    manifest: Manifest | None
    as_streams: Mapping[int, str]
    transport: str
    segments: list[SegmentRow] = field(default_factory=list)
    download_s: list[float] = field(default_factory=list)
    changes: list[QualityChange] = field(default_factory=list)
    decisions: list[GpacDecision] = field(default_factory=list)
    stalls: list[GpacStall] = field(default_factory=list)
    open_stalls: dict[str, int] = field(default_factory=dict)
    underflows: dict[str, int] = field(default_factory=lambda: {"video": 0, "audio": 0})
    inspect: int = 0

    def stream_of(self, as_number: int) -> str:
        if self.manifest is not None and 0 < as_number <= len(self.manifest.adaptation_sets):
            return self.manifest.adaptation_sets[as_number - 1].content_type
        return self.as_streams.get(as_number, f"as{as_number}")

    def line(self, t: float | None, text: str) -> None:
        for pattern, handler in self._handlers():
            match = pattern.match(text)
            if match:
                handler(t, match)
                return

    def _handlers(self) -> list[tuple[re.Pattern[str], Callable[[float | None, re.Match[str]], None]]]:
        return [
            (_GOT, self.on_got),
            (_QUALITY, self.on_quality),
            (_DECISION, self.on_decision),
            (_STALL, self.on_stall),
            (_STALL_EMPTY, self.on_stall_empty),
            (_DONE, self.on_done),
            (_UNDERFLOW, self.on_underflow),
            (_INSPECT_REBUF, self.on_inspect),
        ]

    def on_got(self, t: float | None, m: re.Match[str]) -> None:
        stream = self.stream_of(int(m.group(1)))
        index, level, rate = self.locate(int(m.group(1)), m.group(2))
        download = float(m.group(4))
        self.download_s.append(download)
        self.segments.append(
            SegmentRow(
                stream=stream,
                index=index,
                level=level,
                bitrate_bps=rate,
                bytes=int(m.group(3)),
                t_request=None if t is None else t - download,
                t_first_byte=None,
                t_last_byte=t,
                buffer_s=int(m.group(9)) / 1000,
                stall_s=0.0,
                transport=self.transport,
            )
        )

    def locate(self, as_number: int, name: str) -> tuple[int, int | None, int | None]:
        """(index, level, bandwidth) of a segment file name."""
        if self.manifest is not None and 0 < as_number <= len(self.manifest.adaptation_sets):
            reps = self.manifest.adaptation_sets[as_number - 1].representations
            for level, rep in enumerate(reps):
                number = _match_template(rep, name)
                if number is not None:
                    return number - rep.template.start_number, level, rep.bandwidth
        found = _NUMBER.search(name.rsplit(".", 1)[0])
        return (int(found.group(1)) - 1 if found else -1), None, None

    def on_quality(self, t: float | None, m: re.Match[str]) -> None:
        as_number = int(m.group(1))
        initial = not any(c.adaptation_set == as_number for c in self.changes)
        self.changes.append(
            QualityChange(
                t=t,
                adaptation_set=as_number,
                stream=self.stream_of(as_number),
                bitrate_kbps=int(m.group(2)),
                initial=initial,
            )
        )

    def on_decision(self, t: float | None, m: re.Match[str]) -> None:
        rate = int(m.group(5))
        self.decisions.append(
            GpacDecision(
                t=t,
                algorithm=m.group(1),
                buffer_s=int(m.group(2)) / 1000,
                segment_number=int(m.group(3)),
                quality=int(m.group(4)),
                rate_bps=rate,
                stream=self.stream_for_rate(rate),
            )
        )

    def stream_for_rate(self, rate: int) -> str | None:
        if self.manifest is None:
            return None
        for aset in self.manifest.adaptation_sets:
            if rate in aset.bitrates_bps:
                return aset.content_type
        return None

    def on_stall(self, t: float | None, m: re.Match[str]) -> None:
        self._open(m.group(1).lower(), t, int(m.group(2)) / 1000, int(m.group(3)) / 1000)

    def on_stall_empty(self, t: float | None, m: re.Match[str]) -> None:
        self._open(m.group(1).lower(), t, 0.0, 0.0)

    def _open(self, stream: str, t: float | None, buffer_s: float, threshold_s: float) -> None:
        self.open_stalls[stream] = len(self.stalls)
        self.stalls.append(GpacStall(stream=stream, t_start=t, buffer_s=buffer_s, threshold_s=threshold_s))

    def on_done(self, t: float | None, m: re.Match[str]) -> None:
        stream, duration = m.group(1).lower(), int(m.group(2)) / 1000
        position = self.open_stalls.pop(stream, None)
        if position is None:  # an end without a start line: keep it
            self.stalls.append(GpacStall(stream=stream, t_start=None, buffer_s=0.0, threshold_s=0.0))
            position = len(self.stalls) - 1
        self.stalls[position] = replace(self.stalls[position], duration_s=duration)
        self._attribute(stream, duration)

    def _attribute(self, stream: str, duration: float) -> None:
        for i in range(len(self.segments) - 1, -1, -1):
            if self.segments[i].stream == stream:
                self.segments[i] = replace(self.segments[i], stall_s=self.segments[i].stall_s + duration)
                return

    def on_underflow(self, t: float | None, m: re.Match[str]) -> None:
        stream = m.group(1).lower()
        self.underflows[stream] = self.underflows.get(stream, 0) + 1

    def on_inspect(self, t: float | None, m: re.Match[str]) -> None:
        self.inspect += 1


def _match_template(rep: Representation, name: str) -> int | None:
    """The $Number$ of ``name`` if it is a media segment of ``rep``, else None."""
    pattern = re.escape(rep.template.media.rsplit("/", 1)[-1])
    pattern = pattern.replace(re.escape("$RepresentationID$"), re.escape(rep.id))
    pattern = pattern.replace(re.escape("$Bandwidth$"), str(rep.bandwidth))
    pattern = re.sub(r"\\\$Number(%0\d+d)?\\\$", r"(\\d+)", pattern)
    match = re.fullmatch(pattern, name)
    return int(match.group(1)) if match else None


def parse_gpac_log(
    text: str,
    manifest: Manifest | None = None,
    *,
    as_streams: Mapping[int, str] = DEFAULT_AS_STREAMS,
    transport: str = "",
) -> GpacLog:
    """Parse one GPAC stderr log. With ``manifest``, levels and bitrates are filled in."""
    state = _Parse(manifest=manifest, as_streams=as_streams, transport=transport)
    for t, text_line in records(text):
        state.line(t, text_line)
    return GpacLog(
        segments=tuple(state.segments),
        download_s=tuple(state.download_s),
        quality_changes=tuple(state.changes),
        decisions=tuple(state.decisions),
        stalls=tuple(state.stalls),
        underflows=dict(state.underflows),
        inspect_rebuffering=state.inspect,
    )


# ----------------------------------------------------------------- command


def find_gpac() -> str:
    """Path of the ``gpac`` program; :class:`MissingToolError` says how to get it."""
    path = shutil.which("gpac")
    if path is None:
        raise MissingToolError(GPAC_HINT)
    return path


def gpac_env() -> dict[str, str]:
    """Environment for a headless run (SDL's dummy drivers: no window, no sound device)."""
    return {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}


def gpac_command(
    mpd_url: str,
    *,
    algo: str = DEFAULT_ABR,  # our default is GPAC's grate (players.GPAC_TWINS)
    max_buffer_ms: int = 10000,
    rebuffer_ms: int = 1000,
    buffer_ms: int = 2000,
    start_with: str = "min_bw",
    log_utc: bool = True,
    logs: str = "dash@info:mmio@info:ncl",
    binary: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """argv of a GPAC player run, after the README's verified ``grate_rbuf1000`` line.

    ``buffer_ms`` is the playout buffer, ``max_buffer_ms`` the maximum
    (``mbuffer``), ``rebuffer_ms`` the rebuffering threshold (``rbuffer``:
    the paper's 1 s; it must be below ``buffer_ms``, or GPAC disables
    rebuffering). Run it with :func:`gpac_env` in the environment.
    """
    _check_command(algo, max_buffer_ms, rebuffer_ms, buffer_ms)
    source = f"{mpd_url}:gpac:algo={algo}:start_with={start_with}:debug_as=0,1"
    sink = f"buffer={buffer_ms}:mbuffer={max_buffer_ms}:rbuffer={rebuffer_ms}"
    argv = [
        binary or find_gpac(),
        "-p=0",
        "-i",
        source,
        f"aout:{sink}",
        f"vout:disp=soft:{sink}",
        f"-logs={logs}",
        "-clean-cache",
    ]
    if log_utc:
        argv.append("-log-utc")
    return argv + list(extra)


def _check_command(algo: str, max_buffer_ms: int, rebuffer_ms: int, buffer_ms: int) -> None:
    if algo not in GPAC_ALGOS:
        raise ConfigError("gpac.algo", f"unknown {algo!r} (GPAC 26.07: {', '.join(GPAC_ALGOS)})")
    if not 0 < rebuffer_ms < buffer_ms:
        raise ConfigError(
            "gpac.rebuffer_ms", f"must be > 0 and below buffer_ms ({buffer_ms}); else GPAC never rebuffers"
        )
    if buffer_ms > max_buffer_ms:
        raise ConfigError("gpac.buffer_ms", f"must not exceed max_buffer_ms ({max_buffer_ms})")
