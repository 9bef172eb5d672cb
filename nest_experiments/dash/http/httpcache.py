"""A browser's HTTP cache in front of our player's transport (``http_cache = "browser"``).

A browser answers a request for a URL it already holds from its cache when the stored response is still fresh
(RFC 9111 §4.2: its ``max-age`` not yet reached), without touching the network: no connection, no race, no bytes
on the link. dash.js asks for segments it already has when it replaces buffered media (its fast switch, after an
abandonment): in Chromium those requests never reach the server (the NetLog shows ``HTTP_CACHE_READ_DATA`` and no
``HTTP_TRANSACTION_SEND_REQUEST``; Caddy's access log has no second line for them), and dash.js leaves such a
response out of its throughput estimate (``ThroughputModel._isCachedResponse``: Resource Timing's
``transferSize`` 0). Without this cache our player downloads them again through the bottleneck.

What is stored: a complete ``200`` response whose ``cache-control`` gives ``max-age`` (and neither ``no-store``
nor ``no-cache``). Both of our origins state it for media (``dash.server`` and Caddy: ``max-age`` of
:data:`MEDIA_MAX_AGE_S`; segments never change), so a run does not depend on how old the media files on disk are:
without it a browser falls back to a heuristic lifetime, 10 % of the time since ``last-modified`` (Chromium's
``HttpResponseHeaders::GetFreshnessLifetimes``), which this cache does not apply. The quic-go client reports no
headers, so nothing it fetches is stored (the config refuses the pair).

A hit comes back at once (``t_request = t_first_byte = t_last_byte`` = now) with the stored response's
``transport`` (the protocol that carried it, as Resource Timing's ``nextHopProtocol`` labels a cache hit: its
ALPN; Chromium reports none for cleartext HTTP/1.1, :func:`dash.dashjs.protocols`) and ``cached = True``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nest_experiments.dash.core.fetch import Clock, Fetcher, FetchResult

MODES = ("none", "browser")
MEDIA_MAX_AGE_S = 86400  # what our origins state for media (init and media segments, the MPD): a day
MEDIA_CACHE_CONTROL = f"max-age={MEDIA_MAX_AGE_S}"


def max_age_s(cache_control: str) -> float | None:
    """The freshness lifetime a private cache may give a response with this ``cache-control`` value (seconds),
    or None: not to be stored or reused without asking the server (``no-store``, ``no-cache``, no ``max-age``)."""
    age: float | None = None
    for part in cache_control.split(","):
        name, _, value = part.strip().partition("=")
        name = name.strip().lower()
        if name in ("no-store", "no-cache"):
            return None
        if name == "max-age":
            try:
                age = float(int(value.strip().strip('"')))
            except ValueError:
                return None  # RFC 9111 §4.2.1: an invalid max-age makes the response stale
    return age


@dataclass(frozen=True)
class _Entry:
    result: FetchResult
    stored_at: float
    lifetime_s: float


class CachingFetcher(Fetcher):
    """Answers from memory what ``inner`` fetched before and is still fresh; everything else goes to ``inner``."""

    def __init__(self, inner: Fetcher, *, clock: Clock) -> None:
        self.inner, self.clock = inner, clock
        self.entries: dict[str, _Entry] = {}
        self.hits = 0

    def __getattr__(self, name: str) -> object:  # the inner fetcher's extras (H3Fetcher.implementation, ...)
        return getattr(self.inner, name)

    async def fetch(self, stream: str, path: str) -> FetchResult:
        now = self.clock()
        entry = self.entries.get(path)
        if entry is not None and now - entry.stored_at < entry.lifetime_s:
            self.hits += 1
            return dataclasses.replace(entry.result, t_request=now, t_first_byte=now, t_last_byte=now, cached=True)
        result = await self.inner.fetch(stream, path)
        lifetime = max_age_s(result.cache_control)
        if result.status == 200 and lifetime is not None and lifetime > 0:
            self.entries[path] = _Entry(result=result, stored_at=result.t_last_byte, lifetime_s=lifetime)
        return result

    async def close(self) -> None:
        await self.inner.close()
