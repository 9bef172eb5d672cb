"""The browser's HTTP cache in front of our player's transport (dash.httpcache), and what the ABRs make of it."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from nest_experiments.dash.core.abr.base import PlayerState, Sample
from nest_experiments.dash.core.abr.dashjs import DashJs
from nest_experiments.dash.core.abr.registry import create_abr
from nest_experiments.dash.core.abr.throughput import ThroughputEstimator
from nest_experiments.dash.core.fetch import Fetcher, FetchResult
from nest_experiments.dash.http.httpcache import MEDIA_CACHE_CONTROL, CachingFetcher, max_age_s


@pytest.mark.parametrize(("value", "expected"), [
    ("max-age=86400", 86400.0),
    ("public, max-age=60", 60.0),
    ('max-age="30"', 30.0),
    ("Max-Age=5, immutable", 5.0),
    ("", None),
    ("public", None),
    ("no-store, max-age=60", None),
    ("max-age=60, no-cache", None),
    ("max-age=soon", None),
])
def test_max_age_is_the_lifetime_no_store_and_no_cache_keep_nothing(value: str, expected: float | None) -> None:
    assert max_age_s(value) == expected


class Origin(Fetcher):
    """Answers every GET with 1000 bytes over "h3", 0.5 s after the request, with the given cache-control."""

    def __init__(self, clock: list[float], *, cache_control: str = MEDIA_CACHE_CONTROL, status: int = 200) -> None:
        self.clock, self.cache_control, self.status = clock, cache_control, status
        self.requests: list[str] = []
        self.implementation = "qh3"
        self.closed = False

    async def fetch(self, stream: str, path: str) -> FetchResult:
        self.requests.append(path)
        t = self.clock[0]
        self.clock[0] += 0.5
        return FetchResult(path=path, status=self.status, bytes=1000, t_request=t, t_first_byte=t + 0.1,
                           t_last_byte=t + 0.5, transport="h3", head=b"moof", cache_control=self.cache_control)

    async def close(self) -> None:
        self.closed = True


def cached_pair(origin_kw: dict[str, object] | None = None) -> tuple[CachingFetcher, Origin, list[float]]:
    now = [10.0]
    origin = Origin(now, **(origin_kw or {}))  # type: ignore[arg-type]
    return CachingFetcher(origin, clock=lambda: now[0]), origin, now


def test_a_fresh_response_is_answered_from_memory_at_once_with_the_protocol_that_carried_it() -> None:
    cache, origin, now = cached_pair()
    first = asyncio.run(cache.fetch("video", "/seg_1_4.m4s"))
    now[0] = 75.0
    again = asyncio.run(cache.fetch("video", "/seg_1_4.m4s"))
    assert origin.requests == ["/seg_1_4.m4s"] and cache.hits == 1
    assert not first.cached and again.cached
    assert (again.t_request, again.t_first_byte, again.t_last_byte) == (75.0, 75.0, 75.0)
    assert (again.transport, again.bytes, again.head, again.status) == ("h3", 1000, b"moof", 200)
    other = asyncio.run(cache.fetch("video", "/seg_1_5.m4s"))
    assert not other.cached and origin.requests == ["/seg_1_4.m4s", "/seg_1_5.m4s"]


def test_a_stale_or_uncacheable_response_goes_to_the_network_again() -> None:
    cache, origin, now = cached_pair({"cache_control": "max-age=20"})
    asyncio.run(cache.fetch("video", "/a"))  # stored at t = 10.5, fresh until 30.5
    now[0] = 30.4
    assert asyncio.run(cache.fetch("video", "/a")).cached
    now[0] = 30.6
    assert not asyncio.run(cache.fetch("video", "/a")).cached
    for kw in ({"cache_control": ""}, {"cache_control": "no-store"}, {"cache_control": "max-age=0"},
               {"status": 404}):
        cache, origin, now = cached_pair(kw)
        asyncio.run(cache.fetch("video", "/b"))
        again = asyncio.run(cache.fetch("video", "/b"))
        assert not again.cached and origin.requests == ["/b", "/b"], kw


def test_the_cache_passes_the_inner_fetchers_extras_and_close_through() -> None:
    cache, origin, _ = cached_pair()
    assert cache.implementation == "qh3"  # client.py reads it over h3
    asyncio.run(cache.close())
    assert origin.closed


def sample(level: int, t: float, seconds: float, *, cached: bool = False, nbytes: int = 45_000) -> Sample:
    return Sample(level=level, bytes=nbytes, t_request=t, t_first_byte=t + (0 if cached else 0.3),
                  t_last_byte=t + seconds, duration_s=5.0, buffer_after_s=10.0, cached=cached)


def test_cached_answers_are_not_throughput_samples_for_any_abr() -> None:
    # DVL at ~180 kbit/s, then five segments the cache answered (0 s each: "45 kB in 1 ms" would be 360 Mbit/s)
    network = tuple(sample(0, 10.0 * i, 2.0) for i in range(4))
    cached = tuple(sample(0, 41.0 + 0.001 * i, 0.0, cached=True) for i in range(5))
    est = ThroughputEstimator(method="ewma", weight_per_s=1.5)
    assert est.average_bps(network + cached) == pytest.approx(est.average_bps(network))
    assert est.latency_s(network + cached) == pytest.approx(est.latency_s(network))
    state = PlayerState(now=45.0, buffer_s=10.0, bitrates_bps=(70_000, 180_000, 650_000, 1_300_000),
                        segment_duration_s=5.0, max_buffer_s=30.0, last_level=0, history=network + cached)
    assert state.measured == network
    plain = dataclasses.replace(state, history=network)
    counted = dataclasses.replace(state, history=network + tuple(dataclasses.replace(s, cached=False) for s in cached))
    for name in ("grate", "throughput", "mpc_robust", "dashjs"):
        level = create_abr(name).choose(state).level
        assert level == create_abr(name).choose(plain).level <= 1, name  # ~180 kbit/s: level 0 or 1
        inflated = create_abr(name).choose(counted).estimate_bps  # were the "360 Mbit/s" samples counted
        assert inflated is not None and inflated > 2 * (create_abr(name).choose(plain).estimate_bps or 0), name
    assert isinstance(create_abr("dashjs"), DashJs)
