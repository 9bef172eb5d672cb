"""Sweeps: a base experiment and its axes -> the list of runs, deterministically.

``[sweep]`` maps dotted key paths of the experiment file to lists of values;
the runs are the cartesian product of the axes (in file order) times the
repetitions. Run names are made of the values (``kind-pie_target-5ms_r1``), so
the same experiment always gives the same names and a re-run can skip the
completed ones. Every run's config is validated here, before anything runs.
"""

from __future__ import annotations

import copy
import itertools
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from nest_experiments.config import Experiment, parse_experiment
from nest_experiments.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Axis:
    key: str
    values: tuple[Any, ...]


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    name: str
    repetition: int  # 1-based
    point: tuple[tuple[str, Any], ...]  # (key, value) of each axis
    experiment: Experiment

    @property
    def seed(self) -> int:
        return self.experiment.seed + self.repetition - 1


def parse_axes(raw: dict[str, Any]) -> list[Axis]:
    sweep = raw.get("sweep", {})
    if not isinstance(sweep, dict):
        raise ConfigError("sweep", "expected a table of 'dotted.key' = [values]")
    axes = []
    for key, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"sweep.{key}", f"expected a non-empty list of values, got {values!r}")
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"sweep.{key}", "values repeat; each value once")
        axes.append(Axis(key=key, values=tuple(values)))
    return axes


def set_path(raw: dict[str, Any], key: str, value: Any, *, origin: str) -> None:
    """Set ``a.b.c`` in nested dicts, creating tables on the way."""
    parts = key.split(".")
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if isinstance(child, str) and part == "qdisc":  # qdisc = "pie" shorthand
            child = node[part] = {"kind": child}
        if not isinstance(child, dict):
            raise ConfigError(origin, f"{'.'.join(parts[: i + 1])} is a value, not a table; cannot set {key}")
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def _labels(axes: list[Axis]) -> list[str]:
    labels = [axis.key.split(".")[-1] for axis in axes]
    for i, axis in enumerate(axes):
        if labels.count(labels[i]) > 1:
            labels[i] = "-".join(axis.key.split(".")[-2:])
    return labels


def _slug(value: Any) -> str:
    if isinstance(value, dict):
        return "-".join(_slug(v) for v in value.values())
    return re.sub(r"[^A-Za-z0-9.]+", "", str(value).lower()) or "x"


def run_name(labels: list[str], point: tuple[Any, ...], repetition: int) -> str:
    parts = [f"{label}-{_slug(value)}" for label, value in zip(labels, point, strict=False)]
    return "_".join(parts + [f"r{repetition}"])


def expand(raw: dict[str, Any], *, repetitions: int | None = None) -> list[RunSpec]:
    """Every run of the experiment, validated."""
    axes = parse_axes(raw)
    labels = _labels(axes)
    runs = []
    for point in itertools.product(*(axis.values for axis in axes)):
        resolved = copy.deepcopy(raw)
        resolved.pop("sweep", None)
        for axis, value in zip(axes, point, strict=False):
            set_path(resolved, axis.key, value, origin=f"sweep.{axis.key}")
        exp = parse_experiment(resolved)
        for rep in range(1, (repetitions or exp.repetitions) + 1):
            name = run_name(labels, point, rep)
            runs.append(RunSpec(name=name, repetition=rep, point=tuple(zip((a.key for a in axes), point, strict=False)), experiment=exp))
    return runs


def apply_overrides(raw: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """``--set key=value`` (value in TOML syntax; a bare word is a string)."""
    out = copy.deepcopy(raw)
    for item in assignments:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item}", "expected KEY=VALUE, e.g. experiment.duration=30s")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        set_path(out, key.strip(), value, origin=f"--set {key}")
    return out
