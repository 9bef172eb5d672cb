"""Every ABR algorithm, by the name an experiment gives it: a literal registry (adding an ABR is its own module
plus one line here)."""

from __future__ import annotations

from typing import Any

from nest_experiments.dash.core.abr.base import AbrAlgorithm
from nest_experiments.dash.core.abr.bba import Bba
from nest_experiments.dash.core.abr.bola import Bola
from nest_experiments.dash.core.abr.dashjs import DashJs
from nest_experiments.dash.core.abr.dynamic import Dynamic
from nest_experiments.dash.core.abr.fixed import Fixed
from nest_experiments.dash.core.abr.grate import GpacRate
from nest_experiments.dash.core.abr.mpc import Mpc
from nest_experiments.dash.core.abr.mpc_robust import RobustMpc
from nest_experiments.dash.core.abr.pensieve import Pensieve
from nest_experiments.dash.core.abr.throughput import Throughput, ThroughputSliding
from nest_experiments.errors import ConfigError

ABRS: dict[str, type[AbrAlgorithm]] = {cls.name: cls for cls in (
    GpacRate, Throughput, ThroughputSliding, Bba, Bola, Mpc, RobustMpc, Dynamic, DashJs, Pensieve, Fixed,
)}


def available_abrs() -> list[str]:
    return sorted(ABRS)


def create_abr(name: str, **params: Any) -> AbrAlgorithm:
    """Instantiate a registered algorithm; unknown names raise :class:`ConfigError`."""
    try:
        cls = ABRS[name]
    except KeyError:
        raise ConfigError("abr", f"unknown ABR {name!r} (known: {', '.join(available_abrs())})") from None
    try:
        return cls(**params)
    except TypeError as exc:
        raise ConfigError(f"abr.{name}", f"bad parameters: {exc}") from exc
