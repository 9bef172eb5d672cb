"""Every queue discipline an experiment may put at a link's egress, declared once in ``qdisc/kinds.toml`` and
read here into records: a new kind is its table there (and nothing else of the project's code).

A :class:`QdiscKind` says what the config accepts (its parameters, each with
a type: time, int, size, bool, or one of fixed ``choices``), how tc is told
(``tc``; a bool's ``no`` form) and read back (``readback``, every parameter),
the kernel module behind it (what the kernel probe, the guest image and
the error messages name), whether it is an AQM (the reports compare AQMs;
a FIFO is a baseline) and where its TCA_XSTATS count ECN marks (the row
parser's layout: :mod:`nest_experiments.parsers.tcstats` reads the same
table, without this module, since the router guest's agent runs it).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from nest_experiments import resources
from nest_experiments.errors import ConfigError

QDISC_FILE = resources.data(resources.QDISC_KINDS)
PARAM_TYPES = ("time", "int", "size", "bool", "choice")


@dataclass(frozen=True, kw_only=True)
class QdiscParam:
    name: str
    type: str  # PARAM_TYPES
    tc: str  # tc's keyword ("" for a choice given as the bare word, e.g. CAKE's "diffserv4")
    readback: str  # the key of `tc -j qdisc show` options that must equal what was set
    no: str = ""  # a bool's "off" word where tc has one ("noecn")
    choices: tuple[str, ...] = ()  # type "choice": the words it takes


@dataclass(frozen=True, kw_only=True)
class QdiscKind:
    name: str
    module: str  # the kernel module (sch_*)
    description: str
    params: Mapping[str, QdiscParam]
    aqm: bool = True  # an active queue manager (False: a drop-tail FIFO, the baseline)
    probe: tuple[str, ...] = ()  # tc arguments after the kind that the kernel probe adds (none: its defaults)


def _param(kind: str, name: str, raw: Mapping[str, Any]) -> QdiscParam:
    where = f"{QDISC_FILE}: [{kind}] params.{name}"
    if raw.get("type") not in PARAM_TYPES:
        raise ConfigError(where, f"type must be one of {', '.join(PARAM_TYPES)}, not {raw.get('type')!r}")
    if not raw.get("readback"):
        raise ConfigError(where, "needs a readback key (what is set is read back)")
    choices = tuple(raw.get("choices", ()))
    if (raw["type"] == "choice") != bool(choices):
        raise ConfigError(where, "choices go with type = 'choice', and a choice needs them")
    if raw["type"] != "choice" and not raw.get("tc"):
        raise ConfigError(where, "needs its tc keyword")
    return QdiscParam(name=name, type=raw["type"], tc=str(raw.get("tc", "")), readback=str(raw["readback"]),
                      no=str(raw.get("no", "")), choices=choices)


def kinds_from(data: Mapping[str, Any]) -> dict[str, QdiscKind]:
    """The records of a parsed ``kinds.toml`` (its tables), checked."""
    out = {}
    for name, raw in data.items():
        if not raw.get("module", "").startswith("sch_"):
            raise ConfigError(f"{QDISC_FILE}: [{name}] module", "name its kernel module (sch_...)")
        params = {p: _param(name, p, spec) for p, spec in (raw.get("params") or {}).items()}
        out[name] = QdiscKind(name=name, module=raw["module"], description=str(raw.get("description", "")),
                              params=params, aqm=bool(raw.get("aqm", True)),
                              probe=tuple(str(a) for a in raw.get("probe", ())))
    return out


@cache
def qdisc_kinds() -> dict[str, QdiscKind]:
    """The kinds of ``qdisc/kinds.toml``, by name."""
    with QDISC_FILE.open("rb") as fh:
        return kinds_from(tomllib.load(fh))


def aqm_kinds() -> tuple[str, ...]:
    return tuple(k.name for k in qdisc_kinds().values() if k.aqm)


def fifo_kinds() -> tuple[str, ...]:
    """The kinds that are no AQM (drop-tail FIFOs): the baselines."""
    return tuple(k.name for k in qdisc_kinds().values() if not k.aqm)
