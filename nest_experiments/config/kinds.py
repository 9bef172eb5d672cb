"""Every app kind, declared once: its config (dataclass, parser, tool limits), its launcher, the collectors its
launcher starts, and what it needs of this machine (checked by the preflight, before any namespace exists).

The registry is a literal: adding a kind is one :class:`AppKind` here. The
launcher is named, not imported (``"module:Class"``): apps are the system side,
which the configuration does not import; :meth:`AppKind.launcher_class` loads
it when a run starts, and a unit test loads every one.
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nest_experiments.config import dash, objects, toollimits, traffic
from nest_experiments.config import topology as topo
from nest_experiments.config.core import AppConfig
from nest_experiments.config.tomlread import Table

AppParser = Callable[[Table, str, topo.TopologySpec, float], AppConfig]
#: what an app of a kind lacks on this machine: (its key, why and how to get it), or None
MachineCheck = Callable[[Any], "tuple[str, str] | None"]


@dataclass(frozen=True, kw_only=True)
class AppKind:
    name: str
    config: type[AppConfig]
    parse: AppParser
    limits: Mapping[str, toollimits.Limit]  # the tools' limits its parser checks (toollimits)
    launcher: str  # "module:Class" of its apps.base.App
    collectors: tuple[str, ...] = ()  # nest_experiments.collectors modules its launcher starts (beside the run's own)
    machine: MachineCheck | None = None  # the preflight's (and doctor's) check of this machine

    def launcher_class(self) -> Any:
        """The launcher (an ``apps.base.App`` subclass), imported now."""
        module, _, name = self.launcher.partition(":")
        return getattr(importlib.import_module(module), name)

    def check_machine(self, app: AppConfig) -> tuple[str, str] | None:
        """(``apps.NAME.KEY``, why) when this machine cannot run ``app``, else None."""
        found = self.machine(app) if self.machine is not None else None
        return None if found is None else (f"apps.{app.name}.{found[0]}", found[1])


def _dash_machine(app: dash.DashApp) -> tuple[str, str] | None:
    from nest_experiments.dash import players

    why = players.missing(app.player, app.transport)
    if why is not None:
        return ("player", why)
    if app.http_server == "webfs" and shutil.which("webfsd") is None:
        return (f"apps.{app.name}.http_server", "'webfs' needs webfsd, not found here: apt-get install webfs "
                                                "(./setup.sh installs it)")
    return None


APP_KINDS: dict[str, AppKind] = {k.name: k for k in (
    AppKind(name="iperf3", config=traffic.Iperf3App, parse=traffic.parse_iperf3, limits=toollimits.IPERF3,
            launcher="nest_experiments.apps.iperf3:Iperf3"),
    AppKind(name="sipp", config=traffic.SippApp, parse=traffic.parse_sipp, limits=toollimits.SIPP,
            launcher="nest_experiments.apps.sipp:Sipp"),
    AppKind(name="httperf", config=traffic.HttperfApp, parse=traffic.parse_httperf, limits=toollimits.HTTPERF,
            launcher="nest_experiments.apps.httperf:Httperf"),
    AppKind(name="dash", config=dash.DashApp, parse=dash.parse_dash, limits=toollimits.DASH,
            launcher="nest_experiments.apps.dash:Dash", collectors=("subflows",), machine=_dash_machine),
    AppKind(name="objects", config=objects.ObjectsApp, parse=objects.parse_objects, limits={},
            launcher="nest_experiments.apps.objects:Objects", collectors=("subflows",)),
)}
