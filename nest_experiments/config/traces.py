"""Bandwidth traces: Mahimahi files, rate schedules and named generators, compiled to HTB rate steps (pure).

A link direction can follow a trace instead of a fixed rate. Every source
becomes a :class:`Trace` (a periodic function "bits deliverable by time t"),
and :meth:`Trace.steps` compiles it into one rate per step (default 100 ms):
the average rate the trace allows over each step, looping the trace to cover
the run. :func:`htb_steps` turns that into the rate changes the HTB class
gets (only where the rate changes; a rate of 0 cannot be given to HTB, see
there). Nothing here touches the system; :mod:`nest_experiments.runs.traceplay`
applies the steps.

Sources
-------
Mahimahi (``mm-link``) files
    One integer per line: a millisecond time stamp at which one 1500-byte
    packet may be delivered (several lines may repeat a time stamp). The trace
    loops with a period of its last time stamp. This is the format of the
    public trace sets (FCC broadband, Norway 3G/HSDPA, Pensieve's, the
    connection-racing paper's).
Rate schedules (``.csv`` files or an inline TOML list)
    Rows ``t_s,rate``: from time ``t_s`` (seconds, or with a unit: ``2.5``,
    ``2500ms``) the link runs at ``rate`` (with a unit: ``2mbit``; ``0bit``
    is an outage). The first row is at 0; times increase. A last row
    ``t,loop`` makes the schedule repeat with period ``t``; without it the
    last rate holds until the run ends. A first line ``t_s,rate`` (a header)
    and lines starting with ``#`` are skipped.
Generators (``{ generator = "dvl", seed = 1 }``), see :data:`GENERATORS`
    ``dh``, ``dl``, ``dvl``: the connection-racing paper's Table II patterns;
    ``h2eval``: a 1-5 Mbit/s trajectory like the HTTP/2-vs-QUIC evaluation's;
    ``fcc``, ``hsdpa``: *synthetic*, seeded families that look like the FCC
    broadband and the Norway 3G/HSDPA traces (the real sets cannot be
    downloaded here: point ``trace`` at your own Mahimahi files to use them).

Errors name the file and line (``traces/x.csv:12: ...``) or the key.
"""

from __future__ import annotations

import bisect
import difflib
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from nest_experiments.errors import ConfigError
from nest_experiments.units import parse_rate, parse_time

PACKET_BITS = 1500 * 8  # one Mahimahi delivery opportunity
DEFAULT_STEP_S = 0.1
MIN_HTB_BPS = 8  # HTB keeps rates in bytes/s: 1 byte/s is the least it can do


@dataclass(frozen=True, kw_only=True)
class Trace:
    """A bandwidth trace: a piecewise-constant rate or Mahimahi delivery opportunities.

    ``times_s`` are the change times (from 0, increasing) when ``rates_bps``
    is given, else the delivery opportunities (sorted, each one packet, in
    [0, period] as Mahimahi reads them: the period is the last one, and the
    trace goes on from there). The trace repeats every ``period_s``;
    ``None`` (schedules without ``loop``): the last rate holds for ever.
    """

    source: str  # for messages and the manifest: a file name or "dvl(seed=1)"
    times_s: tuple[float, ...]
    rates_bps: tuple[float, ...] | None
    period_s: float | None

    def bits_until(self, t: float) -> float:
        """Bits the trace lets through in [0, t)."""
        if self.period_s is None:
            return self._bits_in_first(t)
        periods, rest = divmod(round(t, 9), self.period_s)
        if self.period_s - rest < 1e-9:  # t a whole number of periods, give or take float rounding
            periods, rest = periods + 1, 0.0
        rest = 0.0 if rest < 1e-9 else rest
        if self.rates_bps is None:  # stamps lie in [0, period]: one at the period is the next period's 0
            count = float(bisect.bisect_left(self.times_s, rest))
            if periods >= 1:
                count += (periods - 1) * len(self.times_s) + bisect.bisect_left(self.times_s, rest + self.period_s)
            return count * PACKET_BITS
        return periods * self._bits_in_first(self.period_s) + self._bits_in_first(rest)

    def _bits_in_first(self, t: float) -> float:
        assert self.rates_bps is not None
        i = bisect.bisect_right(self.times_s, t) - 1  # the segment t lies in
        return self._bits_at_changes[i] + self.rates_bps[i] * (t - self.times_s[i]) if i >= 0 else 0.0

    @cached_property
    def _bits_at_changes(self) -> tuple[float, ...]:
        """Bits delivered by each change time (rate traces)."""
        assert self.rates_bps is not None
        out, total = [0.0], 0.0
        for a, b, r in zip(self.times_s, self.times_s[1:], self.rates_bps, strict=False):
            total += r * (b - a)
            out.append(total)
        return tuple(out)

    def mean_bps(self, until_s: float) -> float:
        return self.bits_until(until_s) / until_s

    def steps(self, step_s: float, until_s: float) -> tuple[tuple[float, float], ...]:
        """(t, rate) for every step in [0, until_s): the trace's average rate over [t, t + step)."""
        n = max(1, math.ceil(until_s / step_s - 1e-9))
        cum = [self.bits_until(k * step_s) for k in range(n + 1)]
        return tuple((round(k * step_s, 6), (cum[k + 1] - cum[k]) / step_s) for k in range(n))

    def scaled(self, *, time_scale: float = 1.0, rate_scale: float = 1.0) -> Trace:
        """Time compressed (``time_scale`` < 1) or stretched, rates multiplied (opportunities thinned or repeated)."""
        if time_scale == 1.0 and rate_scale == 1.0:
            return self
        times = tuple(t * time_scale for t in self.times_s)
        period = None if self.period_s is None else self.period_s * time_scale
        if self.rates_bps is not None:
            return replace(self, times_s=times, rates_bps=tuple(r * rate_scale for r in self.rates_bps), period_s=period)
        # opportunities: compressing time by s raises the rate by 1/s; keep the rate, then apply rate_scale
        factor = rate_scale * time_scale
        return replace(self, times_s=_thin(times, factor), period_s=period)


def _thin(times: tuple[float, ...], factor: float) -> tuple[float, ...]:
    """Keep (or repeat) opportunities so that their count is multiplied by ``factor`` (evenly)."""
    out: list[float] = []
    acc = 0.0
    for t in times:
        acc += factor
        while acc >= 1.0 - 1e-9:
            out.append(t)
            acc -= 1.0
    return tuple(out)


# ---------------------------------------------------------------- HTB steps


def htb_steps(steps: Sequence[tuple[float, float]], step_s: float) -> tuple[tuple[float, int], ...]:
    """The rate changes for HTB: (t, rate_bps) where the rate changes, starting at t = 0.

    Rates are rounded to whole bytes per second (HTB's unit). HTB cannot run
    at 0: it charges a packet's transmission time at the rate it is sent at
    (a 1500-byte packet at 1 kbit/s owes 12 s, during which the class sends
    nothing even after the rate rises). An outage of length D (consecutive
    steps at 0) is therefore applied as 12000 bit / D: at most one packet
    leaves during it, and its debt is paid when the outage ends.
    """
    out: list[tuple[float, int]] = []
    i = 0
    while i < len(steps):
        t, rate = steps[i]
        if rate <= 0:
            j = i
            while j < len(steps) and steps[j][1] <= 0:
                j += 1
            end = steps[j][0] if j < len(steps) else steps[-1][0] + step_s
            bps = PACKET_BITS / (end - t)
            i = j
        else:
            bps, i = rate, i + 1
        value = max(MIN_HTB_BPS, int(round(bps / 8)) * 8)
        if not out or out[-1][1] != value:
            out.append((t, value))
    return tuple(out)


# ---------------------------------------------------------------- files


def read_file(path: Path) -> Trace:
    """A ``.csv`` rate schedule or, any other name, a Mahimahi trace."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read the trace: {exc}") from exc
    if path.suffix.lower() == ".csv":
        return parse_schedule_csv(text, name=str(path))
    return parse_mahimahi(text, name=str(path))


def parse_mahimahi(text: str, *, name: str) -> Trace:
    """Mahimahi's format: one integer millisecond time stamp per line, each a 1500-byte delivery opportunity."""
    stamps: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        word = line.strip()
        if not word:
            continue
        if not word.isdigit():
            hint = " (rate schedules are .csv files)" if "," in word else ""
            raise ConfigError(f"{name}:{number}", f"expected one integer millisecond time stamp (Mahimahi format), "
                                                  f"got {word!r}{hint}")
        if stamps and int(word) < stamps[-1]:
            raise ConfigError(f"{name}:{number}", f"time stamp {word} ms is before the previous one ({stamps[-1]} ms): "
                                                  "time stamps must not decrease")
        stamps.append(int(word))
    if not stamps:
        raise ConfigError(name, "the trace is empty: expected one millisecond time stamp per line")
    if stamps[-1] == 0:
        raise ConfigError(f"{name}:{len(text.splitlines())}", "the last time stamp (the trace's period) is 0 ms")
    return Trace(source=name, times_s=tuple(s / 1000 for s in stamps), rates_bps=None, period_s=stamps[-1] / 1000)


_HEADER = re.compile(r"\s*t(_s)?\s*,\s*rate(_bps)?\s*", re.IGNORECASE)


def parse_schedule_csv(text: str, *, name: str) -> Trace:
    """Rows ``t_s,rate`` (rate with a unit); an optional ``t_s,rate`` header; a last ``t,loop`` row loops."""
    rows: list[tuple[str, str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#") or (not rows and _HEADER.fullmatch(line)):
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 2:
            raise ConfigError(f"{name}:{number}", f"expected 't_s,rate' (e.g. '0,2mbit'), got {line.strip()!r}")
        rows.append((f"{name}:{number}", cells[0], cells[1]))
    if not rows:
        raise ConfigError(name, "the schedule is empty: expected rows 't_s,rate' (e.g. '0,2mbit')")
    return _schedule(rows, name=name)


def parse_schedule_list(value: list[object], *, path: str) -> Trace:
    """An inline TOML list ``[["0s", "2mbit"], ["10s", "1mbit"], ["20s", "loop"]]``."""
    if not value:
        raise ConfigError(path, "the schedule is empty: expected [[\"0s\", \"2mbit\"], ...]")
    rows = []
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != 2:
            raise ConfigError(f"{path}[{i}]", f"expected [time, rate], e.g. [\"10s\", \"2mbit\"], got {row!r}")
        rows.append((f"{path}[{i}]", str(row[0]) if not isinstance(row[0], str) else row[0],
                     row[1] if isinstance(row[1], str) else repr(row[1])))
    return _schedule(rows, name=path)


def _schedule(rows: list[tuple[str, str, str]], *, name: str) -> Trace:
    times: list[float] = []
    rates: list[float] = []
    period = None
    for where, t_text, rate_text in rows:
        if period is not None:
            raise ConfigError(where, "a row after the 'loop' row: 'loop' ends the schedule")
        t = _seconds(where, t_text)
        if not times and t != 0:
            raise ConfigError(where, f"the first row must be at 0 s, got {t:g} s")
        if times and t <= times[-1]:
            raise ConfigError(where, f"time {t:g} s is not after the previous row's ({times[-1]:g} s): times must increase")
        if rate_text.strip().lower() == "loop":
            period = t
            continue
        times.append(t)
        rates.append(_rate(where, rate_text))
    if not times:
        raise ConfigError(name, "the schedule has no rate before its 'loop' row")
    if not any(rates):
        raise ConfigError(name, "every rate is 0: the link would never deliver anything")
    return Trace(source=name, times_s=tuple(times), rates_bps=tuple(rates), period_s=period)


def _seconds(where: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return parse_time(where, text)
    if not math.isfinite(value) or value < 0:
        raise ConfigError(where, f"expected a time >= 0 in seconds, got {text!r}")
    return value


def _rate(where: str, text: str) -> float:
    m = re.fullmatch(r"\s*0+(\.0*)?\s*([a-zA-Z]+)\s*", text)
    if m:  # an outage: parse_rate refuses 0, so check the unit on 1 of it
        parse_rate(where, f"1{m.group(2)}")
        return 0.0
    return float(parse_rate(where, text))


# ---------------------------------------------------------------- generators


def _levels(source: str, levels_bps: Sequence[float], hold_s: float) -> Trace:
    times = tuple(i * hold_s for i in range(len(levels_bps)))
    return Trace(source=source, times_s=times, rates_bps=tuple(float(r) for r in levels_bps),
                 period_s=len(levels_bps) * hold_s)


def racing_pattern(source: str, initial_kbit: int, final_kbit: int, jump_kbit: int, hold_s: float) -> Trace:
    """Table II of the connection-racing paper: from ``initial`` by ``jump`` every ``hold_s`` to ``final``, then back.

    "Each pattern initiates a loop from an initial bandwidth, jumps to the
    next bandwidth level, and maintains it for a duration, which goes up to
    the final bandwidth. Then, the patterns repeat with the final bandwidth
    as the initial bandwidth, the initial bandwidth as the final bandwidth,
    and a negative value of the jump." Read literally: the way there and the
    way back are each a run of levels held ``hold_s``, so the end levels are
    held twice as long at each turn (DL: 640, 384, 128, 128, 384, 640 kbit/s,
    240 s each, period 24 min).
    """
    there = list(range(initial_kbit, final_kbit + (1 if jump_kbit > 0 else -1), jump_kbit))
    return _levels(source, [k * 1000 for k in there + there[::-1]], hold_s)


H2EVAL_LEVELS_MBIT = (2.0, 4.0, 5.0, 3.0, 1.0, 2.0, 3.0, 1.5, 2.5, 3.0)  # mean 2.7
H2EVAL_HOLD_S = 30.0


def _h2eval(seed: int) -> Trace:
    """1-5 Mbit/s, mean 2.7 Mbit/s (the evaluation's stated range and mean; its figure's exact steps are not in
    the text): ten levels of 30 s, period 300 s."""
    return _levels(f"h2eval(seed={seed})", [m * 1e6 for m in H2EVAL_LEVELS_MBIT], H2EVAL_HOLD_S)


SYNTHETIC_PERIOD_S = 320


def _fcc(seed: int) -> Trace:
    """Synthetic, FCC-broadband-like: a fixed-line rate, steady with small fluctuations and rare dips.

    A session mean drawn log-uniformly in 0.5-6 Mbit/s (Pensieve kept the FCC
    traces with a mean in 0.2-6 Mbit/s), 1 s samples of an AR(1) process on
    its logarithm (coefficient 0.8, noise sd 0.08), and a dip to 30-60% for
    1-5 s with probability 1% per second. Period 320 s.
    """
    rng = random.Random(f"fcc/{seed}")
    mean = math.exp(rng.uniform(math.log(0.5e6), math.log(6e6)))
    x, dip, depth, rates = 0.0, 0, 1.0, list[float]()
    for _ in range(SYNTHETIC_PERIOD_S):
        x = 0.8 * x + rng.gauss(0, 0.08)
        if dip == 0 and rng.random() < 0.01:
            dip, depth = rng.randint(1, 5), rng.uniform(0.3, 0.6)
        factor = depth if dip else 1.0
        dip = max(0, dip - 1)
        rates.append(mean * math.exp(x) * factor)
    return _levels(f"fcc(seed={seed})", rates, 1.0)


def _hsdpa(seed: int) -> Trace:
    """Synthetic, Norway-3G/HSDPA-like (commuting by bus, tram, train): strong swings and short outages.

    A session mean drawn log-uniformly in 0.4-3 Mbit/s; a Markov chain of
    coverage states held for an exponential time: good (mean 20 s, rate x
    1.3), weak (mean 8 s, x 0.35), outage (mean 2 s, 0 bit/s: a tunnel); 1 s
    samples with log-normal noise (sd 0.35), capped at 8 Mbit/s. Period 320 s.
    """
    rng = random.Random(f"hsdpa/{seed}")
    mean = math.exp(rng.uniform(math.log(0.4e6), math.log(3e6)))
    states = {"good": (20.0, 1.3), "weak": (8.0, 0.35), "outage": (2.0, 0.0)}
    nxt = {"good": (("weak", 0.8), ("outage", 0.2)), "weak": (("good", 0.7), ("outage", 0.3)),
           "outage": (("weak", 0.6), ("good", 0.4))}
    state, left, rates = "good", 0.0, list[float]()
    for _ in range(SYNTHETIC_PERIOD_S):
        if left <= 0:
            state = rng.choices([s for s, _ in nxt[state]], [p for _, p in nxt[state]])[0] if rates else "good"
            left = max(1.0, rng.expovariate(1 / states[state][0]))
        left -= 1
        rates.append(min(8e6, mean * states[state][1] * math.exp(rng.gauss(0, 0.35))))
    return _levels(f"hsdpa(seed={seed})", rates, 1.0)


GENERATORS: dict[str, Callable[[int], Trace]] = {
    "dh": lambda seed: racing_pattern(f"dh(seed={seed})", 1152, 896, -256, 240.0),
    "dl": lambda seed: racing_pattern(f"dl(seed={seed})", 640, 128, -256, 240.0),
    "dvl": lambda seed: racing_pattern(f"dvl(seed={seed})", 64, 256, 64, 60.0),
    "h2eval": _h2eval,
    "fcc": _fcc,
    "hsdpa": _hsdpa,
}
"""Named generators; ``dh``, ``dl``, ``dvl`` and ``h2eval`` are fixed patterns (the seed changes nothing),
``fcc`` and ``hsdpa`` draw a different trace for every seed."""


def generate(name: str, *, seed: int, path: str = "generator") -> Trace:
    if name not in GENERATORS:
        close = difflib.get_close_matches(name, list(GENERATORS), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(path, f"unknown trace generator {name!r}{hint}; generators: {', '.join(GENERATORS)}")
    return GENERATORS[name](seed)
