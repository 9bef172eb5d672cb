"""Experiment files: TOML in, frozen, validated dataclasses out.

Everything is checked here, before any namespace exists; every error names
the key path (``links.bottleneck.qdisc.taget: unknown key (did you mean
'target'?)``). An experiment file looks like::

    [experiment]
    name = "dumbbell_pie"
    topology = "dumbbell"          # topologies/dumbbell.toml
    duration = "20s"
    repetitions = 2

    [links.bottleneck]             # settings for both directions ...
    rate = "10mbit"
    qdisc = { kind = "pie", target = "5ms" }
    [links.bottleneck.reverse]     # ... and per direction (forward = a -> b)
    delay = "20ms"
    qdisc = { kind = "pfifo" }

    [apps.bulk]
    kind = "iperf3"
    src = "h1"
    dst = "s1"
    flows = 5

    [firewalls.udp443]             # a rule on a router's forward path (nftables)
    router = "r1"
    proto = "udp"
    port = 443                     # the server's port: packets to it and from it
    rate = "64kbit"                # action = "limit" (default, a policer); "shape" (a queue); "drop" / "accept"

    [sweep]                        # cartesian product, in this order
    "links.bottleneck.qdisc.kind" = ["pie", "fq_pie"]
"""

from __future__ import annotations

from nest_experiments.config.core import (
    DEFAULT_EXPERIMENT,
    AppConfig,
    EgressConfig,
    Experiment,
    FirewallConfig,
    LinkConfig,
    NodeConfig,
    QdiscConfig,
    _parse_link,
    load_default_raw,
    qdisc_kinds,
    read_toml,
)
from nest_experiments.config.dash import CADDY_TRANSPORTS, DASH_H3_CLIENTS, DashApp
from nest_experiments.config.experiment import parse_experiment
from nest_experiments.config.kinds import APP_KINDS, AppKind
from nest_experiments.config.objects import ObjectsApp
from nest_experiments.config.traffic import HttperfApp, Iperf3App, SippApp

__all__ = [
    "APP_KINDS", "CADDY_TRANSPORTS", "DASH_H3_CLIENTS", "AppKind", "DEFAULT_EXPERIMENT", "AppConfig", "DashApp", "EgressConfig", "Experiment",
    "FirewallConfig", "HttperfApp", "Iperf3App", "LinkConfig", "NodeConfig", "ObjectsApp", "QdiscConfig", "SippApp", "_parse_link",
    "load_default_raw", "parse_experiment", "qdisc_kinds", "read_toml",
]
