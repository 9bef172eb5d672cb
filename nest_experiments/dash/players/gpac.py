"""GPAC (26.07, and Debian bullseye's 1.0.1) as the DASH player: its command line and a parser for its log.

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

GPAC 1.0.x (Debian bullseye's 1.0.1, the one a bookworm machine can install:
``setup.sh``) differs, found by running it (a real log:
``tests/data/gpac/v1.0.1``): its ``got`` line is the older ``... (%d kbps) -
duration %g sec - Media Rate: indicated %d - computed %d kbps - buffer %d
ms`` (parsed too); ``aout``/``vout`` take only ``buffer`` (no
``mbuffer``/``rbuffer``); ``debug_as`` is one index (``0,1`` plays the
audio only, so it is left out); its SDL video output (SDL 1.2) crashes
without an X display, so ``vout`` draws through X11 into a private X server
(:func:`virtual_display`, Xvfb); its ``bba0`` stops after the first segment
of each stream (``End of segment ... would block, postponing`` forever, no
``BBA-0:`` line), so it is refused (:data:`LEGACY_BROKEN_ALGOS`). Its outputs
log no rebuffering and, for video, not even an underflow: while video waits
for a segment its ``[VideoOut] buffer`` lines stay at the one frame it holds
(``33 / 2000 ms`` for 22 s in a real run whose second segment came 22 s
late; GPAC then ended at once, that segment too late to show), so for 1.0
such a spell is the stall (``starving``): until the buffer grows again, or,
when the log ends first, until the video segment that came during it. :func:`gpac_version` tells
the versions apart from ``gpac -version``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from nest_experiments.dash.content.mpd import Manifest, Representation
from nest_experiments.dash.core.abr.base import DEFAULT_ABR
from nest_experiments.errors import ConfigError, MissingToolError
from nest_experiments.rundir.rows import SegmentRow

GPAC_HINT = (
    "gpac is not installed: on Debian 12 sudo ./setup.sh installs bullseye's gpac 1.0.1 (unless NEST_GPAC=0); "
    "on Ubuntu apt-get install gpac; elsewhere build a release tag of https://github.com/gpac/gpac and put gpac on PATH"
)
GPAC_ALGOS = ("none", "grate", "gbuf", "bba0", "bolaf", "bolab", "bolau", "bolao")
#: GPAC 1.0.x's algorithms that do not play a whole stream (see the module doc)
LEGACY_BROKEN_ALGOS = {"bba0": "GPAC 1.0.x's bba0 stops after the first segment of each stream; use grate or bolaf, "
                               "or GPAC >= 2.0"}
XVFB_HINT = "GPAC 1.0.x draws video through X11: apt-get install xvfb (sudo ./setup.sh installs it with gpac)"
DEFAULT_AS_STREAMS: Mapping[int, str] = {1: "audio", 2: "video"}  # MP4Box input order in the samples

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_UTC = re.compile(r"^UTC \S+ \(TS (\d+)\) - ")
_GOT = re.compile(
    r"^\[DASH\] AS#(?P<aset>\d+) got (?P<name>\S+) stats: (?P<bytes>\d+) bytes in (?P<secs>\S+) sec at (\d+) kbps"
    r" - dur (\S+) sec - bitrate: (\d+) \(avg (\d+)\) kbps - buffer (?P<buffer>\d+) ms"
)
_GOT_1_0 = re.compile(  # GPAC 1.0.x
    r"^\[DASH\] AS#(?P<aset>\d+) got (?P<name>\S+) stats: (?P<bytes>\d+) bytes in (?P<secs>\S+) sec \((\d+) kbps\)"
    r" - duration (\S+) sec - Media Rate: indicated (\d+) - computed (\d+) kbps - buffer (?P<buffer>\d+) ms"
)
_VERSION = re.compile(r"version (\d+)\.(\d+)")
_QUALITY = re.compile(r"^\[DASH\] AS#(\d+) changed quality to bitrate (\d+) kbps")
_DECISION = re.compile(
    r"^\[DASH\] (BBA-0|BOLA): buffer (\d+) ms, segment number (\d+), new quality (\d+) with rate (\d+)"
)
_STALL = re.compile(r"^\[(Video|Audio)Out\] buffer (\d+) less than min threshold (\d+), rebuffering")
_STALL_EMPTY = re.compile(r"^\[(Video|Audio)Out\] buffer empty, rebuffering")
_DONE = re.compile(r"^\[(Video|Audio)Out\] rebuffer done in (\d+) ms")
_UNDERFLOW = re.compile(r"^\[(Video|Audio)Out\] buffer underflow")
_INSPECT_REBUF = re.compile(r"^\[Inspect\] PID \d+ rebuffering")
_FRAME = re.compile(r"^\[VideoOut\] buffer (\d+) / \d+ ms")  # printed at every frame (and while waiting)
#: GPAC 1.0.x logs no rebuffering: video starves when its buffer is down to the one frame it holds (33 ms at
#: 30 fps) and plays again when the buffer grows; a starving spell this long or longer is a stall
STARVED_MS = 50
STARVED_MIN_S = 0.2
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
    starving: bool = False
    starved_since: float | None = None
    arrived_while_starved: float | None = None  # a video segment came during the spell: the player was waiting
    fed: bool = False

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
            (_GOT_1_0, self.on_got),
            (_QUALITY, self.on_quality),
            (_DECISION, self.on_decision),
            (_STALL, self.on_stall),
            (_STALL_EMPTY, self.on_stall_empty),
            (_DONE, self.on_done),
            (_UNDERFLOW, self.on_underflow),
            (_INSPECT_REBUF, self.on_inspect),
            (_FRAME, self.on_frame),
        ]

    def on_got(self, t: float | None, m: re.Match[str]) -> None:
        stream = self.stream_of(int(m["aset"]))
        index, level, rate = self.locate(int(m["aset"]), m["name"])
        download = float(m["secs"])
        if stream == "video" and self.starved_since is not None:
            self.arrived_while_starved = t
        self.download_s.append(download)
        self.segments.append(
            SegmentRow(
                stream=stream,
                index=index,
                level=level,
                bitrate_bps=rate,
                bytes=int(m["bytes"]),
                t_request=None if t is None else t - download,
                t_first_byte=None,
                t_last_byte=t,
                buffer_s=int(m["buffer"]) / 1000,
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

    def on_frame(self, t: float | None, m: re.Match[str]) -> None:
        """With ``starving`` (GPAC 1.0.x, times known): the video buffer down to one frame until it grows again
        is a stall."""
        if not self.starving or t is None:
            return
        if int(m.group(1)) > STARVED_MS:
            self._starved_until(t)
            self.fed = True
        elif self.fed and self.starved_since is None:
            self.starved_since, self.arrived_while_starved = t, None

    def _starved_until(self, t: float) -> None:
        if self.starved_since is not None and t - self.starved_since >= STARVED_MIN_S:
            duration = round(t - self.starved_since, 3)
            self.stalls.append(GpacStall(stream="video", t_start=self.starved_since, buffer_s=0.0,
                                         threshold_s=STARVED_MS / 1000, duration_s=duration))
            self._attribute("video", duration)
        self.starved_since = None

    def finish(self) -> None:
        """The log ended while video starved: a stall up to the segment that came during it (GPAC 1.0 ends at
        once when that segment is already too late), else the end of the content (no stall)."""
        if self.starved_since is not None and self.arrived_while_starved is not None:
            self._starved_until(self.arrived_while_starved)


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
    starving: bool = False,
) -> GpacLog:
    """Parse one GPAC stderr log. With ``manifest``, levels and bitrates are filled in. ``starving`` (for
    GPAC 1.0.x, which logs no rebuffering): the ``[VideoOut] buffer X / Y ms`` level at or below
    :data:`STARVED_MS` for :data:`STARVED_MIN_S` or more, then growing, is a video stall (needs ``-log-utc``)."""
    state = _Parse(manifest=manifest, as_streams=as_streams, transport=transport, starving=starving)
    for t, text_line in records(text):
        state.line(t, text_line)
    state.finish()
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


@dataclass(frozen=True, kw_only=True)
class GpacVersion:
    """``gpac -version``: the line, and (major, minor) when it names them."""

    line: str
    number: tuple[int, int] | None

    @property
    def legacy(self) -> bool:
        """GPAC 1.0.x: the older command line and log (see the module doc); unknown versions are taken as new."""
        return self.number is not None and self.number < (2, 0)


def parse_version(text: str) -> GpacVersion:
    """The version of ``gpac -version``'s output (``... - version 26.07-revrelease``, ``version 1.0.1-rev...``)."""
    line = next((ln.strip() for ln in _ANSI.sub("", text).splitlines() if "version" in ln), text.strip()[:80])
    match = _VERSION.search(line)
    return GpacVersion(line=line, number=(int(match.group(1)), int(match.group(2))) if match else None)


DEFAULT_CACHE = Path("/tmp/gpac_cache")  # GPAC creates it at start-up even with -cache=DIR or -p=0 (1.0.1)


def remove_default_cache(existed: bool) -> None:
    """Remove GPAC's default cache folder if it did not exist before our GPAC ran (``existed``) and is empty: our
    runs use a private cache (``-cache``), so the folder is only GPAC's start-up leaving it behind."""
    if not existed:
        with contextlib.suppress(OSError):  # not empty (someone else's GPAC filled it) or gone already
            DEFAULT_CACHE.rmdir()


def gpac_version(binary: str, env: Mapping[str, str]) -> GpacVersion:
    """Run ``gpac -p=0 -version`` (with ``env``: GPAC writes ``$HOME/.gpac``) and parse it."""
    existed = DEFAULT_CACHE.exists()
    try:
        out = subprocess.run([binary, "-p=0", "-version"], capture_output=True, text=True, check=False,
                             env=dict(env), timeout=30)
    finally:
        remove_default_cache(existed)
    return parse_version(out.stdout + out.stderr)


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
    legacy: bool = False,
    cache_dir: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """argv of a GPAC player run, after the README's verified ``grate_rbuf1000`` line.

    ``buffer_ms`` is the playout buffer, ``max_buffer_ms`` the maximum
    (``mbuffer``), ``rebuffer_ms`` the rebuffering threshold (``rbuffer``:
    the paper's 1 s; it must be below ``buffer_ms``, or GPAC disables
    rebuffering). Run it with :func:`gpac_env` in the environment.
    ``legacy`` (GPAC 1.0.x): no ``debug_as``, ``aout``/``vout`` with
    ``buffer`` only, and ``vout`` needs an X display (:func:`virtual_display`).
    ``cache_dir``: GPAC's HTTP cache (``-cache``, in 1.0.1 and 26.07; else its
    config's, ``/tmp/gpac_cache``, shared by every run and every user).
    """
    _check_command(algo, max_buffer_ms, rebuffer_ms, buffer_ms)
    if legacy and algo in LEGACY_BROKEN_ALGOS:
        raise ConfigError("gpac.algo", f"{algo!r}: {LEGACY_BROKEN_ALGOS[algo]}")
    source = f"{mpd_url}:gpac:algo={algo}:start_with={start_with}" + ("" if legacy else ":debug_as=0,1")
    sink = f"buffer={buffer_ms}" + ("" if legacy else f":mbuffer={max_buffer_ms}:rbuffer={rebuffer_ms}")
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
    if cache_dir is not None:
        argv.append(f"-cache={cache_dir}")
    if log_utc:
        argv.append("-log-utc")
    return argv + list(extra)


XVFB_START_S = 10.0


@contextmanager
def virtual_display(xvfb: str | None = None) -> Iterator[str]:
    """A private X server (Xvfb, no TCP) for GPAC 1.0.x's video output; yields its ``DISPLAY``, stops it after."""
    path = xvfb or shutil.which("Xvfb")
    if path is None:
        raise MissingToolError(XVFB_HINT)
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([path, "-displayfd", str(write_fd), "-nolisten", "tcp", "-screen", "0", "1280x720x24"],
                            pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as pipe:
            number = pipe.readline().strip()  # Xvfb writes its display number when it accepts connections
        if not number.isdigit():
            raise MissingToolError(f"Xvfb did not start (exit {proc.poll()}): {XVFB_HINT}")
        yield f":{number}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=XVFB_START_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _check_command(algo: str, max_buffer_ms: int, rebuffer_ms: int, buffer_ms: int) -> None:
    if algo not in GPAC_ALGOS:
        raise ConfigError("gpac.algo", f"unknown {algo!r} (GPAC 26.07: {', '.join(GPAC_ALGOS)})")
    if not 0 < rebuffer_ms < buffer_ms:
        raise ConfigError(
            "gpac.rebuffer_ms", f"must be > 0 and below buffer_ms ({buffer_ms}); else GPAC never rebuffers"
        )
    if buffer_ms > max_buffer_ms:
        raise ConfigError("gpac.buffer_ms", f"must not exceed max_buffer_ms ({max_buffer_ms})")
