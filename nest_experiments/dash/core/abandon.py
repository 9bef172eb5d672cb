"""dash.js's AbandonRequestsRule for our player (``abandon = "dashjs"``), sans-I/O.

dash.js 5.2.1 (``src/streaming/rules/abr/AbandonRequestsRule.js``, active by
default) watches every media request on each XHR progress event and
abandons it for a lower level when it would take too long:

- not before the first byte (``request.firstByteDate``), not twice for one
  segment index (``abandonDict``), not while the buffer is above the stable
  buffer time (``mediaPlayerModel.getBufferTimeDefault()``: the page sets
  ``bufferTimeDefault`` to ``max_buffer``, so ours is ``max_buffer_s``);
- only with at least ``minThroughputSamplesThreshold`` (6) progress events,
  more than ``minSegmentDownloadTimeThresholdInMs`` (500 ms) after the first
  byte, and the body not complete;
- throughput: the bytes over the time of the progress events after the
  first (the first holds the request's latency), in kbit/s (rounded);
- it keeps the request when the whole body at that rate would take less
  than ``abandonDurationMultiplier`` (1.8) segment durations, or when the
  level is the lowest;
- else the target is the highest level whose bitrate is at most that
  throughput (the lowest if none; ``AbrController.getOptimalRepresentationForBitrate``),
  and it abandons only when the bytes still to come exceed the whole
  segment at the target level (``request.bytesTotal * target / current``).

Then (``AbrController._onSegmentDownloadShouldBeAbandoned``,
``StreamProcessor._prepareForAbandonQualitySwitch``) the request is aborted,
the same segment asked again at the target level, and for
``abandonLoadTimeout`` (10 s) the ThroughputRule makes no switch (it returns
"no change" in the ABANDON_LOAD state): the target level stays.

dash.js's second way out of a slow request, its XHR timeout
(:data:`REQUEST_TIMEOUT_S`), asks the same URL again a second later, at most
3 times.

Progress events: Chromium fires an XHR's ``progress`` at most every 50 ms
(Blink's ``XMLHttpRequestProgressEventThrottle``: kMinimumProgressEventDispatchingInterval);
dash.js's HTTPLoader turns each into a trace ``{d: ms since the last one (the
first: since the request), b: bytes since the last one}``. :class:`Progress`
keeps the same traces from the transport's byte count polled every
:data:`PROGRESS_INTERVAL_S`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

PROGRESS_INTERVAL_S = 0.05  # Chromium's XHR progress events: at most one per 50 ms
ABANDON_LOAD_S = 10.0  # dash.js streaming.abandonLoadTimeout (ms 10000)

# dash.js's other way out of a slow request (Settings.js): streaming.fragmentRequestTimeout = 20000 ms is the
# XHR's timeout (XHRLoader: xhr.timeout), counted from the send; Blink aborts the XHR then, and HTTPLoader
# asks the same URL again after retryIntervals.MediaSegment = 1000 ms, at most retryAttempts.MediaSegment = 3
# times (HTTPLoader._retriggerRequest). After the last attempt our player lets the request run.
REQUEST_TIMEOUT_S = 20.0
# dash.js's first level of a stream (AbrController.getInitialBitrateFor, no setting, nothing saved, no throughput
# yet): DEFAULT_VIDEO_BITRATE = 1000 kbit/s, DEFAULT_BITRATE = 100 kbit/s for the others; the level is
# getOptimalRepresentationForBitrate's (optimal_level)
DASHJS_INITIAL_BPS = {"video": 1_000_000.0, "audio": 100_000.0}
RETRY_INTERVAL_S = 1.0
RETRY_ATTEMPTS = 3


@dataclass(frozen=True)
class Trace:
    """One progress event: seconds since the previous one (the first: since the request), bytes in them."""

    d_s: float
    nbytes: int


@dataclass
class Progress:
    """An outstanding media request as dash.js's progress events see it."""

    t_request: float
    t_first_byte: float | None = None  # the first progress event
    loaded: int = 0
    total: int = 0  # content-length; 0: unknown (never abandoned: the body is never "not complete")
    traces: list[Trace] = field(default_factory=list)
    _t_last: float | None = None

    def observe(self, now: float, loaded: int, total: int) -> bool:
        """A poll of the transport at ``now``: a progress event when bytes came and the last event is at least
        :data:`PROGRESS_INTERVAL_S` old (True: one was recorded)."""
        last = self.t_request if self._t_last is None else self._t_last
        if loaded <= self.loaded or (self._t_last is not None and now - last < PROGRESS_INTERVAL_S - 1e-9):
            return False
        if self.t_first_byte is None:
            self.t_first_byte = now
        self.traces.append(Trace(d_s=now - last, nbytes=loaded - self.loaded))
        self.loaded, self.total, self._t_last = loaded, total, now
        return True


@dataclass(frozen=True, kw_only=True)
class Abandon:
    """The rule's verdict: ask the segment again at ``level``; ``throughput_bps`` is what it measured."""

    level: int
    throughput_bps: float


@dataclass(frozen=True, kw_only=True)
class AbandonRule:
    """dash.js 5.2.1's defaults (``streaming.abr.rules.abandonRequestsRule.parameters``)."""

    duration_multiplier: float = 1.8
    min_download_s: float = 0.5
    min_traces: int = 6

    def decide(self, p: Progress, *, now: float, buffer_s: float, stable_buffer_s: float, level: int,
               bitrates_bps: Sequence[int], segment_duration_s: float) -> Abandon | None:
        """Whether to abandon the request ``p`` for segment ``level`` (an index into ``bitrates_bps``, ascending)
        at ``now`` (None: keep it). The caller remembers abandoned segment indices (one abandonment each)."""
        if p.t_first_byte is None or buffer_s > stable_buffer_s:
            return None
        if not (len(p.traces) >= self.min_traces and now - p.t_first_byte > self.min_download_s
                and p.loaded < p.total):
            return None
        nbytes = sum(t.nbytes for t in p.traces[1:])
        ms = max(sum(t.d_s for t in p.traces[1:]) * 1000.0, 1.0)
        kbit = round(8 * nbytes / ms)
        # JS: bytesTotal * 8 / 0 / 1000 = Infinity (never below the bound): abandoned for the lowest level
        estimate_s = p.total * 8 / kbit / 1000 if kbit > 0 else float("inf")
        if estimate_s < segment_duration_s * self.duration_multiplier or level == 0:
            return None
        target = optimal_level(bitrates_bps, kbit)
        remaining = p.total - p.loaded
        if remaining > p.total * bitrates_bps[target] / bitrates_bps[level]:
            return Abandon(level=target, throughput_bps=kbit * 1000.0)
        return None


def optimal_level(bitrates_bps: Sequence[int], kbit: float) -> int:
    """``AbrController.getOptimalRepresentationForBitrate``: the highest level at most ``kbit`` kbit/s, the
    lowest when none is (or the throughput is 0)."""
    fits = [i for i, b in enumerate(bitrates_bps) if b / 1000.0 <= kbit] if kbit > 0 else []
    return max(fits) if fits else min(range(len(bitrates_bps)), key=lambda i: bitrates_bps[i])
