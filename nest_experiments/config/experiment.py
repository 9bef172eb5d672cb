"""One experiment from its resolved TOML: the core's tables, and each app by its kind (:mod:`.kinds`)."""

from __future__ import annotations

import copy
from typing import Any

from nest_experiments.config import topology as topo
from nest_experiments.config.core import (
    CONGESTION_CONTROLS,
    RUNTIMES,
    AppConfig,
    Experiment,
    _parse_firewalls,
    _parse_links,
    _parse_nodes,
    _qdelay_links,
    _sample_links,
    _wire_links,
    as_name_long,
)
from nest_experiments.config.design import parse_design
from nest_experiments.config.kinds import APP_KINDS
from nest_experiments.config.tomlread import Table, as_bool, as_int, as_name, as_str, one_of, positive_int
from nest_experiments.units import parse_time


def parse_experiment(raw: dict[str, Any]) -> Experiment:
    """Validate one resolved experiment (sweep already applied)."""
    top = Table("", raw)
    # sweep, paper: applied by nest_experiments.config.sweep; design: the paper's set-up (config.design)
    top.mark("sweep", "paper", "design", "experiment", "nodes", "links", "apps", "firewalls")
    top.done()  # an unknown top-level table first: it may be a misspelt [experiment]
    parse_design(raw)
    e = top.table("experiment")
    name = e.get("name", as_name_long)
    topology = topo.load("experiment.topology", e.get("topology", as_str, "dumbbell"))
    duration = e.get("duration", lambda p, v: parse_time(p, v, allow_zero=False))
    links = _parse_links(top.table("links"), topology)
    apps = _parse_apps(top.table("apps"), topology, duration)
    exp = Experiment(
        name=name,
        description=e.get("description", as_str, ""),
        topology=topology,
        duration_s=duration,
        repetitions=e.get("repetitions", positive_int, 1),
        seed=e.get("seed", as_int, 1),
        congestion_control=e.get("tcp_congestion_control", one_of(CONGESTION_CONTROLS), "cubic"),
        runtime=e.get("runtime", one_of(RUNTIMES), "auto"),
        sample_interval_s=e.get("sample_interval", lambda p, v: parse_time(p, v, allow_zero=False), 0.1),
        sample_links=_sample_links(e, links),
        qdelay_links=_qdelay_links(e, links, topology),
        keep_captures=e.get("keep_captures", as_bool, False),
        end_when_done=e.get("end_when_done", as_bool, False),
        wire_links=_wire_links(e, links),
        links=links,
        apps=apps,
        firewalls=_parse_firewalls(top.table("firewalls"), topology),
        nodes=_parse_nodes(top.table("nodes"), topology),
        raw=copy.deepcopy(raw),
    )
    e.done()
    top.done()
    return exp


def _parse_apps(t: Table, spec: topo.TopologySpec, duration: float) -> tuple[AppConfig, ...]:
    apps = []
    for name in t.data:
        a = t.table(name)
        as_name(a.path, name, max_len=20)
        kind = a.get("kind", one_of(tuple(APP_KINDS)))
        app = APP_KINDS[kind].parse(a, name, spec, duration)
        a.done()
        apps.append(app)
    return tuple(apps)
