"""``fixed``: one level for the whole session."""

from __future__ import annotations

from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState
from nest_experiments.errors import ConfigError


class Fixed(AbrAlgorithm):
    """One level for the whole session, whatever the network does: the player pinned to a representation.

    For measurements per representation (the HTTP/2-QUIC evaluation's protocol
    overhead and link utilization). ``level`` is a 0-based index; a ladder with
    fewer levels (e.g. the audio stream's) gets its top level.
    """

    name = "fixed"

    def __init__(self, *, level: int = 0) -> None:
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise ConfigError("level", f"expected a level index >= 0, got {level!r}")
        self.level = level

    def choose(self, state: PlayerState) -> Decision:
        return Decision(level=min(self.level, state.top))
