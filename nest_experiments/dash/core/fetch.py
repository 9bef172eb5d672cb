"""The one I/O seam between the player and the network.

The player (sans-I/O state machine plus an asyncio driver) asks a
:class:`Fetcher` for whole objects; transports (``tcp``, ``mptcp``, ``h2``,
``h3``) implement it in :mod:`nest_experiments.dash.http.transports`; tests use a
fake. Every time is seconds on the run's monotonic clock (``clock()``).
"""

from __future__ import annotations

import abc
import builtins
import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

Clock = Callable[[], float]


class Transfer(Protocol):
    """A response on its way, as a transport counts it (``transports._Exchange``)."""

    path: str
    t_request: float
    nbytes: int  # body bytes so far
    length: int  # content-length (0: unknown)


#: The message of the ``CancelledError`` that aborts a request the player abandoned (``task.cancel(ABANDONED)``),
#: as opposed to the end of the session: transports reset its stream (h2, h3) or close its connection (HTTP/1.1)
ABANDONED = "abandoned by the player"

#: Who watches the transfers a fetch starts (the player's abandon rule): a transport calls it with each
#: transfer it starts for a request of the task it runs in (a retry of the same request is a new transfer).
#: Set in the context of the fetch's task; None (the default): nobody watches.
TRANSFER_WATCH: contextvars.ContextVar[Callable[[Transfer], None] | None] = contextvars.ContextVar(
    "TRANSFER_WATCH", default=None)


@dataclass(frozen=True, kw_only=True)
class FetchResult:
    """One completed HTTP GET."""

    path: str
    status: int
    bytes: int  # body bytes received
    t_request: float  # when the request was sent
    t_first_byte: float  # first body (or header) byte received
    t_last_byte: float  # last body byte received
    transport: str  # "tcp" | "mptcp" | "h2" | "h3"
    body: builtins.bytes | None = None  # the body, for manifests (.mpd) only; segments are counted, not kept
    head: builtins.bytes = b""  # the body's first bytes (up to mp4.HEAD_BYTES): a segment's boxes (dash.mp4)
    alt_svc: str = ""  # the response's alt-svc header (h2; the race transport learns h3 from it)
    cache_control: str = ""  # the response's cache-control header (h1, h2, h3; dash.httpcache stores by it)
    cached: bool = False  # answered by the browser cache (dash.httpcache), not the network


class Fetcher(abc.ABC):
    """Fetches objects from one origin over one transport.

    ``stream`` names the logical stream ("video", "audio", "mpd"): transports
    that keep one connection per adaptation set (``tcp``, ``mptcp``) use it to
    pick the connection; multiplexing transports (``h2``, ``h3``) open one
    stream per request on a single connection.
    """

    @abc.abstractmethod
    async def fetch(self, stream: str, path: str) -> FetchResult:
        """GET ``path``; raise :class:`nest_experiments.errors.RunError` on failure."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every connection."""
