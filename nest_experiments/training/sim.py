"""The player on bandwidth traces, segment by segment, many sessions at once (pure numpy).

A chunk-level model of :class:`nest_experiments.dash.core.player.PlayerSession`'s
video stream, vectorised over a batch of sessions that step in lockstep
(every session has the same segments). What it takes from the real code,
not copied: the ladder and segment sizes (:mod:`nest_experiments.dash.content.media`:
``load_ladder``, ``segment_size``, ``vbr_factors``), the player's defaults
(:class:`~nest_experiments.dash.core.player.PlayerConfig`), eq. (1)'s weights
(:mod:`nest_experiments.dash.core.qoe`), the traces
(:mod:`nest_experiments.config.traces`) and, for the rule-based ABRs, the registry's
algorithms themselves (:class:`RegistryPolicy`).

The player's rules, per segment (as ``PlayerSession`` applies them):

- it asks for the next segment when its buffer is below ``max_buffer_s``,
  else waits until it is (``next_wakeup``: the excess plus 10 us);
- the ABR decides at the request, on the buffer at that moment and the
  history of the segments downloaded so far;
- the first time a level is chosen, its init segment (``init_bytes``) is
  fetched first: one more request;
- the first byte comes ``rtt_s`` after the request; then the bytes arrive
  at the link's rate (below);
- while playing, the buffer drains in real time; when it runs empty before
  the segment arrives, a stall starts; playback starts, and resumes, when
  the buffer holds ``threshold_s`` (or all the media left); the stall time
  is written on the segment whose arrival ended it (so it is counted once);
- the reward of segment ``n`` is eq. (1)'s term: ``R_n - 4.3 x stall_n -
  |R_n - R_(n-1)|`` (Mbit/s), whose sum is :func:`~nest_experiments.dash.core.qoe.qoe_eq1`.

The link (the model's assumptions, checked against the emulation by
``bench/pensieve_sim_check.py``): the trace's rate times ``payload_fraction``
(headers: 0.95 is Pensieve's ``PACKET_PAYLOAD_PORTION``), minus the audio
stream's share, ``min(audio_bps, half the link)`` (the real player fetches
audio beside video: over time the audio takes its bitrate, and never more
than a fair half while both download). The trace is sampled on a grid of
``step_s`` (1 s: exact for the built-in generators, whose rates change on
whole seconds) and integrated linearly within a step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from nest_experiments.config import traces
from nest_experiments.dash.content import media
from nest_experiments.dash.core import qoe
from nest_experiments.dash.core.abr import pensieve_policy as learned
from nest_experiments.dash.core.abr.base import AbrAlgorithm, PlayerState, Sample
from nest_experiments.dash.core.abr.registry import create_abr
from nest_experiments.dash.core.player import PlayerConfig
from nest_experiments.errors import ConfigError

WAKE_S = 1e-5  # PlayerSession.next_wakeup's margin past max_buffer
BUFFER_EPS = 1e-6  # PlayerSession: "below max_buffer_s - 1e-6", "threshold - 1e-6"


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """The player, the media and the link model."""

    ladder: str = "abr_quic_tcp"
    clip_s: float | None = None  # None: the ladder's whole duration
    max_buffer_s: float = 12.0  # experiments/abr_quic_tcp.toml (the player's own default: PlayerConfig)
    threshold_s: float = PlayerConfig().threshold_s
    rtt_s: float = 0.08
    payload_fraction: float = 0.95
    audio_bps: float = 128_000.0
    vbr: float = 0.0
    vbr_seed: int = 0
    init_bytes: int = 300  # an init segment's response (ftyp box + HTTP headers), fetched at a level's first use
    step_s: float = 1.0
    horizon_s: float = 1500.0

    def __post_init__(self) -> None:
        PlayerConfig(max_buffer_s=self.max_buffer_s, threshold_s=self.threshold_s)  # the player's own checks
        if not 0 < self.payload_fraction <= 1:
            raise ConfigError("sim.payload_fraction", f"must be in (0, 1], got {self.payload_fraction}")
        if self.rtt_s < 0 or self.audio_bps < 0 or self.step_s <= 0 or self.horizon_s <= 0:
            raise ConfigError("sim", "rtt_s and audio_bps must be >= 0, step_s and horizon_s > 0")


@dataclass(frozen=True, kw_only=True)
class Video:
    """The video stream as the simulator needs it: the ladder, and every segment's duration and sizes."""

    bitrates_bps: np.ndarray  # (levels,)
    durations_s: np.ndarray  # (segments,)
    sizes_bytes: np.ndarray  # (segments, levels)
    segment_duration_s: float

    @property
    def count(self) -> int:
        return len(self.durations_s)

    @property
    def duration_s(self) -> float:
        return float(self.durations_s.sum())


def video_of(config: SimConfig) -> Video:
    """Sizes as :func:`nest_experiments.dash.content.media.generate` writes them for this ladder, clip and VBR."""
    ladder = media.load_ladder(config.ladder)
    params = media.MediaParams(ladder=ladder, duration_s=config.clip_s or ladder.duration_s,
                               vbr=config.vbr, seed=config.vbr_seed)
    durations = [media.segment_duration(params, n) for n in range(1, params.segment_count + 1)]
    factors = media.vbr_factors(params.segment_count, params.vbr, params.seed)
    rates = [lv.bitrate_bps for lv in ladder.video.levels]
    sizes = [[media.segment_size(r, d, f) for r in rates] for d, f in zip(durations, factors, strict=True)]
    return Video(bitrates_bps=np.asarray(rates, float), durations_s=np.asarray(durations),
                 sizes_bytes=np.asarray(sizes, float), segment_duration_s=ladder.segment_duration_s)


# ------------------------------------------------------------------ links


def cumulative_bits(trace: traces.Trace, *, step_s: float, until_s: float) -> np.ndarray:
    """Bits the trace delivers by ``k x step_s`` for k = 0..until/step (vectorised for rate traces)."""
    n = int(np.ceil(until_s / step_s - 1e-9))
    grid = np.arange(n + 1) * step_s
    if trace.rates_bps is None:  # Mahimahi opportunities: the trace's own integral
        return np.array([trace.bits_until(float(t)) for t in grid])
    times, rates = np.asarray(trace.times_s), np.asarray(trace.rates_bps)
    at_changes = np.concatenate([[0.0], np.cumsum(rates[:-1] * np.diff(times))])

    def within(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(times, t, side="right") - 1
        return at_changes[i] + rates[i] * (t - times[i])

    if trace.period_s is None:
        return within(grid)
    periods, rest = np.divmod(grid, trace.period_s)
    return periods * within(np.array([trace.period_s]))[0] + within(rest)


def video_bits(cum: np.ndarray, *, step_s: float, config: SimConfig) -> np.ndarray:
    """The video's share of a trace's cumulative bits (payload, minus the audio: see the module's doc)."""
    rate = np.diff(cum, axis=-1) / step_s * config.payload_fraction
    video = rate - np.minimum(config.audio_bps, rate / 2)
    return np.concatenate([np.zeros(cum.shape[:-1] + (1,)), np.cumsum(video, axis=-1) * step_s], axis=-1)


@dataclass(frozen=True, kw_only=True)
class TracePool:
    """Traces on one grid, long enough for a session to start anywhere in the first period."""

    names: tuple[str, ...]
    cum_bits: np.ndarray  # (traces, grid points): the video's bits by each grid time
    periods_s: np.ndarray  # (traces,)
    step_s: float
    horizon_s: float

    def sessions(self, index: np.ndarray, offset_s: np.ndarray) -> np.ndarray:
        """Cumulative video bits from each session's start (grid-aligned offset), shape (batch, horizon/step + 1)."""
        h = int(round(self.horizon_s / self.step_s))
        j = np.round(np.asarray(offset_s) / self.step_s).astype(int)
        rows = self.cum_bits[np.asarray(index)[:, None], j[:, None] + np.arange(h + 1)]
        return rows - rows[:, :1]


def trace_pool(items: Sequence[traces.Trace], config: SimConfig) -> TracePool:
    longest = max((t.period_s or 0.0) for t in items)
    until = longest + config.horizon_s
    cum = np.stack([cumulative_bits(t, step_s=config.step_s, until_s=until) for t in items])
    periods = np.array([t.period_s or 0.0 for t in items])
    return TracePool(names=tuple(t.source for t in items), cum_bits=video_bits(cum, step_s=config.step_s, config=config),
                     periods_s=periods, step_s=config.step_s, horizon_s=config.horizon_s)


def generated(spec: Sequence[tuple[str, int]]) -> list[traces.Trace]:
    """``[("fcc", 1), ("dvl", 1), ...]`` -> the built-in generators' traces."""
    return [traces.generate(name, seed=seed) for name, seed in spec]


def finish_times(cum: np.ndarray, start_s: np.ndarray, bits: np.ndarray, step_s: float) -> np.ndarray:
    """When each row's link has delivered ``bits`` more after ``start_s`` (np.inf past the horizon)."""
    n = cum.shape[1]
    k = np.clip(np.floor(start_s / step_s).astype(int), 0, n - 2)
    rows = np.arange(len(cum))
    c0 = cum[rows, k] + (cum[rows, k + 1] - cum[rows, k]) * (start_s / step_s - k)
    target = c0 + bits
    big = cum[:, -1].max() + bits.max() + 1.0
    flat = (cum + rows[:, None] * big).ravel()
    pos = np.searchsorted(flat, target + rows * big, side="left") - rows * n
    past = pos >= n
    pos = np.clip(pos, 1, n - 1)
    lo, hi = cum[rows, pos - 1], cum[rows, pos]
    frac = np.where(hi > lo, (target - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0)
    t = np.maximum((pos - 1 + frac) * step_s, start_s)
    return np.where(past, np.inf, t)


# --------------------------------------------------------------- policies


@dataclass(frozen=True, kw_only=True)
class Step:
    """What a policy sees when segment ``index`` of every session is requested."""

    index: int
    now_s: np.ndarray  # (batch,)
    buffer_s: np.ndarray
    last_level: np.ndarray  # -1: no segment yet
    throughput_bps: np.ndarray  # (batch, HISTORY), oldest first, zeros before the first segment
    download_s: np.ndarray
    next_sizes_bytes: np.ndarray  # (batch, levels)
    segments_left: np.ndarray
    record: Record


class SimPolicy(Protocol):
    def reset(self, batch: int) -> None: ...

    def decide(self, step: Step) -> np.ndarray: ...


def observation(step: Step, bitrates_bps: np.ndarray) -> np.ndarray:
    """The learned policy's input (:func:`nest_experiments.dash.core.abr.pensieve_policy.features`) for a step."""
    last = np.where(step.last_level < 0, bitrates_bps[0], bitrates_bps[np.maximum(step.last_level, 0)])
    return learned.features(last_bitrate_bps=last, top_bitrate_bps=float(bitrates_bps[-1]), buffer_s=step.buffer_s,
                            throughput_bps=step.throughput_bps, download_s=step.download_s,
                            next_sizes_bytes=step.next_sizes_bytes, segments_left=step.segments_left)


@dataclass
class NetworkPolicy:
    """A :class:`~nest_experiments.dash.core.abr.pensieve_policy.Policy` over a batch: greedy, or sampled with ``rng``."""

    policy: learned.Policy
    rng: np.random.Generator | None = None

    def reset(self, batch: int) -> None:
        return None

    def decide(self, step: Step) -> np.ndarray:
        if step.index == 0:
            return np.full(len(step.buffer_s), learned.FIRST_LEVEL)
        x = observation(step, np.asarray(self.policy.bitrates_bps, float))
        if self.rng is None:
            return self.policy.act(x)
        p = self.policy.probabilities(x)
        return (p.cumsum(axis=1) > self.rng.random((len(p), 1))).argmax(axis=1)


@dataclass
class RandomPolicy:
    """Uniformly random levels (the baseline a trained policy must beat)."""

    levels: int
    rng: np.random.Generator

    def reset(self, batch: int) -> None:
        return None

    def decide(self, step: Step) -> np.ndarray:
        return self.rng.integers(0, self.levels, size=len(step.buffer_s))


@dataclass
class RegistryPolicy:
    """An ABR of the registry (``bba``, ``bola``, ``mpc_fast``, ...), one instance and memo per session."""

    name: str
    max_buffer_s: float
    abrs: list[AbrAlgorithm] = field(default_factory=list)
    memos: list[Mapping[str, Any] | None] = field(default_factory=list)

    def reset(self, batch: int) -> None:
        self.abrs = [create_abr(self.name) for _ in range(batch)]
        self.memos = [None] * batch

    def decide(self, step: Step) -> np.ndarray:
        rec, i = step.record, step.index
        out = np.zeros(len(self.abrs), dtype=int)
        for b, abr in enumerate(self.abrs):
            memo = self.memos[b]
            state = PlayerState(
                now=float(step.now_s[b]), buffer_s=float(step.buffer_s[b]),
                bitrates_bps=tuple(int(r) for r in rec.bitrates_bps), segment_duration_s=rec.segment_duration_s,
                max_buffer_s=self.max_buffer_s, last_level=None if i == 0 else int(rec.levels[b, i - 1]),
                history=rec.samples(b, i), next_index=i, segment_count=rec.levels.shape[1],
                memo=MappingProxyType({}) if memo is None else memo)
            decision = abr.choose(state)
            self.memos[b] = decision.memo
            out[b] = min(max(decision.level, 0), len(rec.bitrates_bps) - 1)
        return out


# ---------------------------------------------------------------- sessions


@dataclass
class Record:
    """Every session's segments: what the player's ``segments.csv`` would hold, plus the rewards."""

    bitrates_bps: np.ndarray
    segment_duration_s: float
    levels: np.ndarray  # (batch, segments)
    sizes_bytes: np.ndarray
    t_request: np.ndarray
    t_first_byte: np.ndarray
    t_last_byte: np.ndarray
    buffer_s: np.ndarray  # right after the segment arrived (before playback resumed)
    stall_s: np.ndarray  # the stall that ended with this segment
    durations_s: np.ndarray  # (segments,)
    rewards: np.ndarray
    startup_delay_s: np.ndarray  # (batch,)
    truncated: np.ndarray  # (batch,): the trace's horizon ended first

    def samples(self, b: int, upto: int) -> tuple[Sample, ...]:
        """Session ``b``'s first ``upto`` segments as the ABRs' :class:`~nest_experiments.dash.core.abr.base.Sample`s."""
        return tuple(
            Sample(level=int(self.levels[b, n]), bytes=int(self.sizes_bytes[b, n]),
                   t_request=float(self.t_request[b, n]), t_first_byte=float(self.t_first_byte[b, n]),
                   t_last_byte=float(self.t_last_byte[b, n]), duration_s=float(self.durations_s[n]),
                   buffer_after_s=float(self.buffer_s[b, n]))
            for n in range(upto))

    @property
    def qoe(self) -> np.ndarray:
        return self.rewards.sum(axis=1)

    @property
    def avg_bitrate_bps(self) -> np.ndarray:
        return self.bitrates_bps[self.levels].mean(axis=1)

    @property
    def rebuffer_s(self) -> np.ndarray:
        return self.stall_s.sum(axis=1)


def _empty_record(video: Video, batch: int) -> Record:
    shape = (batch, video.count)
    return Record(bitrates_bps=video.bitrates_bps, segment_duration_s=video.segment_duration_s,
                  levels=np.zeros(shape, dtype=int), sizes_bytes=np.zeros(shape), t_request=np.zeros(shape),
                  t_first_byte=np.zeros(shape), t_last_byte=np.zeros(shape), buffer_s=np.zeros(shape),
                  stall_s=np.zeros(shape), durations_s=video.durations_s, rewards=np.zeros(shape),
                  startup_delay_s=np.full(batch, np.nan), truncated=np.zeros(batch, dtype=bool))


@dataclass
class _Player:
    """The batch's player state between segments."""

    now: np.ndarray
    buffer: np.ndarray
    downloaded: np.ndarray  # media seconds downloaded
    playing: np.ndarray  # bool
    stalled: np.ndarray  # bool (neither: starting up)
    stall_start: np.ndarray
    tput: np.ndarray
    dl: np.ndarray
    inited: np.ndarray  # (batch, levels): the level's init segment is there


def simulate(cum_bits: np.ndarray, policy: SimPolicy, *, video: Video, config: SimConfig,
             step_s: float | None = None) -> Record:
    """Play every session (one row of ``cum_bits``: the video's bits by each grid time) with ``policy``."""
    batch = len(cum_bits)
    step_s = config.step_s if step_s is None else step_s
    rec = _empty_record(video, batch)
    z = np.zeros(batch)
    p = _Player(now=z.copy(), buffer=z.copy(), downloaded=z.copy(), playing=np.zeros(batch, bool),
                stalled=np.zeros(batch, bool), stall_start=z.copy(), tput=np.zeros((batch, learned.HISTORY)),
                dl=np.zeros((batch, learned.HISTORY)), inited=np.zeros((batch, len(video.bitrates_bps)), bool))
    policy.reset(batch)
    for i in range(video.count):
        _wait_for_room(p, config)
        step = Step(index=i, now_s=p.now.copy(), buffer_s=p.buffer.copy(),
                    last_level=rec.levels[:, i - 1] if i else np.full(batch, -1), throughput_bps=p.tput.copy(),
                    download_s=p.dl.copy(), next_sizes_bytes=np.broadcast_to(video.sizes_bytes[i], (batch, len(video.bitrates_bps))),
                    segments_left=np.full(batch, video.count - i), record=rec)
        level = np.asarray(policy.decide(step), dtype=int)
        _download(p, rec, i, level, cum_bits, video, config, step_s)
    return rec


def _wait_for_room(p: _Player, config: SimConfig) -> None:
    full = p.playing & (p.buffer >= config.max_buffer_s - BUFFER_EPS)
    wait = np.where(full, np.maximum(p.buffer - config.max_buffer_s, 0.0) + WAKE_S, 0.0)
    p.now += wait
    p.buffer -= wait


def _download(p: _Player, rec: Record, i: int, level: np.ndarray, cum: np.ndarray, video: Video,
              config: SimConfig, step_s: float) -> None:
    size = video.sizes_bytes[i, level]
    rows = np.arange(len(level))
    init = ~p.inited[rows, level]
    p.inited[rows, level] = True
    init_done = finish_times(cum, p.now + config.rtt_s, np.full(len(level), 8.0 * config.init_bytes), step_s)
    request = np.where(init, np.minimum(init_done, config.horizon_s), p.now)
    first = request + config.rtt_s
    last = finish_times(cum, first, 8 * size, step_s)
    rec.truncated |= ~np.isfinite(last)
    last = np.where(np.isfinite(last), last, config.horizon_s)
    took = last - p.now
    runs_out = p.playing & (took >= p.buffer - 1e-9)  # PlayerSession._play_until
    p.stall_start = np.where(runs_out, p.now + p.buffer, p.stall_start)
    p.stalled |= runs_out
    p.playing &= ~runs_out
    p.buffer = np.where(p.playing, p.buffer - took, np.where(runs_out, 0.0, p.buffer)) + video.durations_s[i]
    p.downloaded += video.durations_s[i]
    rec.levels[:, i], rec.sizes_bytes[:, i] = level, size
    rec.t_request[:, i], rec.t_first_byte[:, i], rec.t_last_byte[:, i] = request, first, last
    rec.buffer_s[:, i] = p.buffer
    _resume(p, rec, i, last, video, config)
    p.now = last
    fetch = last - request  # the media segment's request to last byte (Sample.request_rate_bps)
    p.tput = np.concatenate([p.tput[:, 1:], (8 * size / np.maximum(fetch, 1e-3))[:, None]], axis=1)
    p.dl = np.concatenate([p.dl[:, 1:], fetch[:, None]], axis=1)
    rate = video.bitrates_bps[level] / 1e6
    prev = video.bitrates_bps[rec.levels[:, i - 1]] / 1e6 if i else rate
    rec.rewards[:, i] = rate - qoe.REBUFFER_PENALTY * rec.stall_s[:, i] - qoe.SMOOTH_PENALTY * np.abs(rate - prev)


def _resume(p: _Player, rec: Record, i: int, now: np.ndarray, video: Video, config: SimConfig) -> None:
    remaining = video.duration_s - (p.downloaded - p.buffer)
    ready = ~p.playing & (p.buffer >= np.minimum(config.threshold_s, remaining) - BUFFER_EPS)
    rec.stall_s[:, i] = np.where(ready & p.stalled, now - p.stall_start, 0.0)
    rec.startup_delay_s = np.where(ready & ~p.stalled & np.isnan(rec.startup_delay_s), now, rec.startup_delay_s)
    p.playing |= ready
    p.stalled &= ~ready
