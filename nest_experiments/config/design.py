"""The paper's design as data: an experiment file's ``[[design]]`` rows, and ours beside each.

A study reproduces a paper; every value of its set-up the paper states (or
does not) is a row of the experiment file::

    [[design]]
    item = "VoIP load"
    paper = 10
    unit = "calls/s"
    source = 'Sec. IV-A: "SIPp ... generates 10 calls per second"'
    key = "apps.voip1.rate"          # ours: this key of the resolved experiment (a swept key: its values)
    why = "SIPp at 10 calls/s per pair needs ~1 CPU ..."    # required where ours departs from the paper
    effect = "VoIP delay and jitter under a lighter load"    # required where ours departs
    claims = ["audio_rtt"]                                    # the claims the departure may move

``paper = "not stated"`` where the paper is silent (then ``why`` says why we
chose ours, and ``source`` may be left out). A row without ``key`` gives
``ours`` as a value. :func:`lines` compares ours with the paper's (times,
rates and sizes by their value, ``"45s"`` against ``"184s"``), for the run
as it was resolved: the default or ``--paper``. The reports draw the table
(paper | ours | why different | expected effect); a shipped file's departure
without a reason fails ``tests/unit/test_design_tables.py``; a user's own
change shows as a departure "not given a reason" and never stops a run (a ``--set`` that replaces the table
holding a row's key shows ours as :data:`UNSET`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nest_experiments.config.tomlread import Table, as_str
from nest_experiments.errors import ConfigError
from nest_experiments.units import parse_rate, parse_size, parse_time

NOT_STATED = "not stated"
#: The reports' words for a departure that carries no reason (a user's own change).
NO_REASON = "not given a reason (a change of this file)"
#: Ours where the row's key is not in the resolved experiment (its default is not the design's record).
UNSET = "not set in this run"


@dataclass(frozen=True)
class DesignRow:
    """One ``[[design]]`` row as written."""

    item: str
    paper: Any
    source: str = ""
    unit: str = ""
    key: str = ""
    ours: Any = None
    why: str = ""
    effect: str = ""
    claims: tuple[str, ...] = ()

    @property
    def stated(self) -> bool:
        return not (isinstance(self.paper, str) and self.paper.strip().lower() == NOT_STATED)


@dataclass(frozen=True)
class DesignLine:
    """A row with ours resolved: what the table shows."""

    row: DesignRow
    ours: Any
    departs: bool  # ours differs from a value the paper states

    @property
    def reason(self) -> str:
        if self.ours == UNSET:  # the row's reason is for the file's value, which this run replaced
            return NO_REASON
        return self.row.why or (NO_REASON if self.departs else "")


def _value(path: str, value: object) -> Any:
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return list(value)
    raise ConfigError(path, f"expected a string, number, boolean or a list of them, got {value!r}")


def _claims(path: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(path, f"expected a list of claim ids, got {value!r}")
    return tuple(value)


def parse_design(raw: Mapping[str, Any]) -> tuple[DesignRow, ...]:
    """The file's ``[[design]]`` rows, each checked (a one-line error naming ``design[i].key``)."""
    data = raw.get("design", [])
    if not isinstance(data, list):
        raise ConfigError("design", "expected an array of tables: [[design]] rows (item, paper, source, key or "
                                    "ours, why, effect, claims)")
    rows = []
    for i, entry in enumerate(data):
        t = Table(f"design[{i}]", entry)
        row = DesignRow(item=t.get("item", as_str), paper=t.get("paper", _value), source=t.get("source", as_str, ""),
                        unit=t.get("unit", as_str, ""), key=t.get("key", as_str, ""), ours=t.get("ours", _value, None),
                        why=t.get("why", as_str, ""), effect=t.get("effect", as_str, ""),
                        claims=t.get("claims", _claims, ()))
        t.done()
        if bool(row.key) == (row.ours is not None):
            raise ConfigError(f"design[{i}]", f"{row.item!r}: give either key (ours read from the experiment) "
                                              "or ours (a value), not both or neither")
        if row.stated and not row.source:
            raise ConfigError(f"design[{i}].source", f"{row.item!r}: quote the paper's sentence the value comes "
                                                     f"from (or write paper = \"{NOT_STATED}\")")
        if not row.stated and not row.why:
            raise ConfigError(f"design[{i}].why", f"{row.item!r}: the paper does not state it; say why ours")
        rows.append(row)
    return tuple(rows)


def lookup(raw: Mapping[str, Any], key: str) -> Any:
    """Ours for ``key``: a swept key's values (from ``[sweep]``), else the dotted key's value in the file, else
    :data:`UNSET` (a ``--set`` that replaced the table holding it, or a misspelt key: the table shows it and the
    shipped files' test refuses it)."""
    sweep = raw.get("sweep") or {}
    for axis, values in sweep.items():
        if key in (k.strip() for k in axis.split(",")) and isinstance(values, list):
            if "," in axis:  # a zipped axis: this key's part of each tuple
                at = [k.strip() for k in axis.split(",")].index(key)
                return [v[at] if isinstance(v, list) else v for v in values]
            return list(values)
    node: Any = raw
    for part in key.split("."):
        if isinstance(node, str) and part == "kind":  # qdisc = "pie" shorthand
            return node
        if not isinstance(node, Mapping) or part not in node:
            return UNSET
        node = node[part]
    return node


def _norm(value: Any) -> Any:
    """A value compared by what it means: a time, rate or size by its number, a list as the set of its values."""
    if isinstance(value, list):
        return frozenset(_norm(v) for v in value)
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().lower()
    for kind, parse in (("s", parse_time), ("bit/s", parse_rate), ("B", parse_size)):
        try:
            return (kind, float(parse("design", text)))
        except ConfigError:
            continue
    return text


def departs(paper: Any, ours: Any) -> bool:
    """Whether ours differs from the paper's stated value (a single swept value counts as that value)."""
    a, b = _norm(paper), _norm(ours)
    if isinstance(b, frozenset) and len(b) == 1 and not isinstance(a, frozenset):
        (b,) = b
    return bool(a != b)


def lines(raw: Mapping[str, Any]) -> list[DesignLine]:
    """Each row of the resolved experiment with ours and whether it departs."""
    out = []
    for row in parse_design(raw):
        ours = lookup(raw, row.key) if row.key else row.ours
        out.append(DesignLine(row=row, ours=ours, departs=row.stated and (ours == UNSET or departs(row.paper, ours))))
    return out


def unreasoned(found: Sequence[DesignLine]) -> list[str]:
    """The departures that carry no reason or no expected effect, and every row whose key the experiment lacks (a
    "not stated" row too), one line each (the shipped files have none)."""
    return [f"{line.row.item!r}: paper {line.row.paper!r}, ours {line.ours!r}: "
            + (f"{line.row.key} {UNSET}" if line.ours == UNSET else "no why" if not line.row.why
               else "no effect on claims")
            for line in found if line.ours == UNSET or (line.departs and not (line.row.why and line.row.effect))]


__all__ = ["NOT_STATED", "NO_REASON", "UNSET", "DesignLine", "DesignRow", "departs", "lines", "lookup", "parse_design",
           "unreasoned"]
