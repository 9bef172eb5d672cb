"""The axes of a sweep's shared report: the swept value it compares, the value it compares at, and the rest.

A run's *point* (its swept keys, without the repetition) splits three ways: the *compared* axis (its values are
the report's columns, bars and Mann-Whitney U pairs), the *at* axis (the comparison is made at each of its
values: the table's rows, the bars' groups, the queue-delay panels) and the *context* (every other swept key).
A *cell* is (context, at, compared): the repetitions of one point. A study declares its axes
(:attr:`nest_experiments.studies.Study.axes`); the NeST paper compares the AQM at each target
(:data:`AQM_AT_TARGET`, also the default). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nest_experiments.analysis.results import AqmEgress
from nest_experiments.errors import NestExpError
from nest_experiments.units import parse_time

Context = tuple[tuple[str, str], ...]
CellKey = tuple[Context, str, str]  # context, at, compared


@dataclass(frozen=True, kw_only=True)
class Axis:
    """One axis of the report: which swept keys carry it, and how the report names, orders and shows its values."""

    name: str  # as the report names it, e.g. "AQM", "target"
    plural: str  # e.g. "AQMs"
    suffix: str  # swept keys ending in this carry its value (several keys with one value count once)
    unswept: str  # where the value comes from when no key is swept, as the report says it
    from_egresses: Callable[[Sequence[AqmEgress]], str]  # that value, from the run's AQM egresses ("-": none)
    order: Callable[[Iterable[str]], list[str]] = sorted
    label: Callable[[str], str] = str  # a value as the report shows it, e.g. "FQ-PIE"
    colors: Mapping[str, str] = field(default_factory=dict)  # a value's color in the figures (others: a palette)
    title: str = ""  # the bar charts' x axis (the at axis), e.g. "target queue delay"

    def keys(self, keys: Iterable[str]) -> list[str]:
        return [k for k in keys if k.endswith(self.suffix)]

    def value(self, point: Mapping[str, str], egresses: Sequence[AqmEgress]) -> str:
        """Every swept value of the axis joined by ``+``; without one, the egresses'."""
        values = sorted({v for k, v in point.items() if k.endswith(self.suffix)})
        return "+".join(values) if values else self.from_egresses(egresses)


@dataclass(frozen=True, kw_only=True)
class Axes:
    """A study's report axes: ``compared`` at each value of ``at``; the other swept keys are the context."""

    compared: Axis
    at: Axis

    def context(self, point: Mapping[str, str]) -> Context:
        return tuple(sorted((k, v) for k, v in point.items()
                            if not k.endswith(self.compared.suffix) and not k.endswith(self.at.suffix)))


# ---------------------------------------------------------------- the AQM at each target (the NeST paper's)


AQM_NAMES = {"pie": "PIE", "fq_pie": "FQ-PIE", "codel": "CoDel", "fq_codel": "FQ-CoDel", "cake": "CAKE"}
AQM_COLORS = {"pie": "#1f77b4", "fq_pie": "#ff7f0e"}


def aqm_name(aqm: str) -> str:
    return "+".join(AQM_NAMES.get(a, a) for a in aqm.split("+"))


def order_aqms(aqms: Iterable[str]) -> list[str]:
    """PIE first, then FQ-PIE, then the rest by name."""
    rank = {"pie": 0, "fq_pie": 1}
    return sorted(aqms, key=lambda a: (rank.get(a, 2), a))


def order_targets(targets: Iterable[str]) -> list[str]:
    """By duration when every part reads as one (``5ms`` < ``10ms``), else by name."""
    def key(t: str) -> tuple[int, float, str]:
        try:
            return (0, sum(parse_time("target", p) for p in t.split("+")), t)
        except NestExpError:
            return (1, 0.0, t)
    return sorted(targets, key=key)


def target_ms(target: str) -> float | None:
    try:
        return parse_time("target", target) * 1e3
    except NestExpError:
        return None


def egress_kinds(egs: Sequence[AqmEgress]) -> str:
    kinds = sorted({e.kind for e in egs})
    return "+".join(kinds) if kinds else "-"


def egress_targets(egs: Sequence[AqmEgress]) -> str:
    targets = sorted({e.target_ms for e in egs if e.target_ms is not None})
    return "+".join(f"{t:g}ms" for t in targets) if targets else "-"


AQM = Axis(name="AQM", plural="AQMs", suffix="qdisc.kind", unswept="the non-FIFO qdisc in links.json",
           from_egresses=egress_kinds, order=order_aqms, label=aqm_name, colors=AQM_COLORS)
TARGET = Axis(name="target", plural="targets", suffix="qdisc.target", unswept="from links.json",
              from_egresses=egress_targets, order=order_targets, title="target queue delay")
AQM_AT_TARGET = Axes(compared=AQM, at=TARGET)
