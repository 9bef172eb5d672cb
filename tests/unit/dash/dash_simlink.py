"""A virtual-time link for driving the sans-I/O player in tests (no sockets, no sleeping).

The link shares a piecewise-constant rate equally among the transfers in
progress (fluid processor sharing); a transfer's first byte arrives one RTT
after its request. Sizes come from the manifest: bitrate x segment duration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nest_experiments.dash.content import media
from nest_experiments.dash.content.mpd import Manifest, parse_mpd
from nest_experiments.dash.core.fetch import FetchResult
from nest_experiments.dash.core.player import DoneAction, FetchAction, PlayerSession

INIT_BYTES = 1000


def manifest_for(ladder_name: str, *, duration_s: float | None = None) -> Manifest:
    """Parse the MPD that :func:`media.generate` would write, without touching disk."""
    import xml.etree.ElementTree as ET

    ladder = media.load_ladder(ladder_name)
    params = media.MediaParams(ladder=ladder, duration_s=duration_s or ladder.duration_s, vbr=0.0, seed=0)
    return parse_mpd(ET.tostring(media.build_mpd(params)))


@dataclass
class Transfer:
    action: FetchAction
    size: int
    t_request: float
    t_first: float
    remaining: float = field(init=False)

    def __post_init__(self) -> None:
        self.remaining = float(self.size)


@dataclass
class SimLink:
    """``steps``: [(t, bit/s), ...] sorted by t (the first at t=0)."""

    steps: list[tuple[float, float]]
    rtt_s: float = 0.02
    transfers: list[Transfer] = field(default_factory=list)

    def rate_bps(self, t: float) -> float:
        rate = self.steps[0][1]
        for start, bps in self.steps:
            if start <= t + 1e-12:
                rate = bps
        return rate

    def next_change(self, t: float) -> float | None:
        later = [start for start, _ in self.steps if start > t + 1e-12]
        return min(later) if later else None


def size_of(manifest: Manifest, action: FetchAction) -> int:
    if action.kind == "init":
        return INIT_BYTES
    aset = manifest.adaptation_set(action.stream)
    seg = manifest.segment_media_duration_s(action.stream, action.index or 0)
    return media.segment_size(aset.bitrates_bps[action.level], seg)


def run(session: PlayerSession, link: SimLink, *, limit_s: float = 3600.0) -> float:
    """Drive ``session`` over ``link`` until it is done; return the end time."""
    now = session.clock_s
    while now < limit_s:
        action = session.next_action(now)
        if isinstance(action, FetchAction):
            size = size_of(session.manifest, action)
            link.transfers.append(Transfer(action, size, now, now + link.rtt_s))
            continue
        if isinstance(action, DoneAction):
            return now
        now = _step(session, link, now, action.until)
    raise AssertionError(f"simulation did not finish by {limit_s} s")


def _step(session: PlayerSession, link: SimLink, now: float, until: float | None) -> float:
    """Advance to the next event (a completion, ``until``, a rate change or a first byte)."""
    while True:
        active = [t for t in link.transfers if t.t_first <= now + 1e-12]
        share = link.rate_bps(now) / 8 / max(len(active), 1)
        candidates = [t.t_first for t in link.transfers if t.t_first > now + 1e-12]
        candidates += [now + t.remaining / share for t in active]
        candidates += [c for c in (until, link.next_change(now)) if c is not None]
        if not candidates:
            raise AssertionError("player stuck: nothing in flight and nothing to wait for")
        t_next = max(min(candidates), now)
        for t in active:
            t.remaining -= share * (t_next - now)
        now = t_next
        if _complete(session, link, now) or (until is not None and now >= until - 1e-12):
            return now


def _complete(session: PlayerSession, link: SimLink, now: float) -> bool:
    done = [t for t in link.transfers if t.t_first <= now + 1e-12 and t.remaining <= 1e-6]
    for t in done:
        link.transfers.remove(t)
        result = FetchResult(
            path=t.action.path,
            status=200,
            bytes=t.size,
            t_request=t.t_request,
            t_first_byte=t.t_first,
            t_last_byte=now,
            transport="sim",
        )
        session.on_fetch_complete(result, now)
    return bool(done)
