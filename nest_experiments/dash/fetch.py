"""The one I/O seam between the player and the network.

The player (sans-I/O state machine plus an asyncio driver) asks a
:class:`Fetcher` for whole objects; transports (``tcp``, ``mptcp``, ``h2``,
``h3``) implement it in :mod:`nest_experiments.dash.transports`; tests use a
fake. Every time is seconds on the run's monotonic clock (``clock()``).
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


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
    alt_svc: str = ""  # the response's alt-svc header (h2; the race transport learns h3 from it)


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
