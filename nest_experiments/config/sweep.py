"""Sweeps: a base experiment and its axes -> the list of runs, deterministically.

``[sweep]`` maps dotted key paths of the experiment file to lists of values
(``"a.b, c.d" = [...]`` sets several keys to the same value, e.g. the same
qdisc on two bottlenecks); the runs are the cartesian product of the axes (in file order) times the
repetitions. Run names are made of the values (``kind-pie_target-5ms_r1``), so
the same experiment always gives the same names and a re-run can skip the
completed ones. Every run's config is validated here, before anything runs.

The order the runs go in is a randomized complete block design: each
repetition is a block that holds every sweep point once, the blocks run one
after the other, and inside each block the points are shuffled with the
experiment's seed (and the block's number). Whatever drifts during a sweep
(the host's load, a cold VM's first minutes) then falls on every point
alike instead of on whichever point the file lists first; the order is the
same every time the same experiment is expanded, so resume keeps working.

``[sweep_repeat]`` gives single points more repetitions than the rest (``"abr-bola_transport-h3_trace-fcc-1" =
2``: the point's name is its run name without ``_rN``), e.g. an A/A pair that measures how far two identical
runs differ (a noise floor) without repeating the whole sweep: such a point runs ``max(its count, the
experiment's repetitions)`` times, its extra repetitions in the blocks after the others'. With ``[sweep_block]``, an
extra repetition replays the point's first block (its ``[sweep_block]`` keys take 1, not its own number): it is an A/A
copy of that run (the same trace), not a new trace.

``[sweep_block]`` sets keys from the block (the repetition number): ``"links.bottleneck.forward.trace.seed" =
"repetition"`` gives every run of block ``r`` the trace of seed ``r``, the same in every sweep point of the block,
and a new one in the next block: sessions of one block are then paired by their trace (the ABR study's design,
where each trace is one "video" played under every ABR and transport), and ``run --until-decided`` adds traces
by adding blocks.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import random
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from nest_experiments.config import Experiment, parse_experiment
from nest_experiments.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Axis:
    key: str  # one dotted key, or several separated by commas that take the same value together
    values: tuple[Any, ...]

    @property
    def keys(self) -> list[str]:
        return [k.strip() for k in self.key.split(",")]


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    name: str
    repetition: int  # 1-based
    point: tuple[tuple[str, Any], ...]  # (key, value) of each axis
    experiment: Experiment
    position: int = 0  # 1-based place in the sweep's run order (see the module docstring)

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
        if any(not k.strip() for k in key.split(",")):
            raise ConfigError(f"sweep.{key}", "an empty key in a comma-separated list of keys")
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
    labels = [axis.keys[0].split(".")[-1] for axis in axes]
    for i, axis in enumerate(axes):
        if labels.count(labels[i]) > 1:
            labels[i] = "-".join(axis.keys[0].split(".")[-2:])
    return labels


def _slug(value: Any) -> str:
    if isinstance(value, dict):
        return "-".join(_slug(v) for v in value.values())
    return re.sub(r"[^A-Za-z0-9.]+", "", str(value).lower()) or "x"


def run_name(labels: list[str], point: tuple[Any, ...], repetition: int) -> str:
    parts = [f"{label}-{_slug(value)}" for label, value in zip(labels, point, strict=False)]
    return "_".join(parts + [f"r{repetition}"])


def point_name(labels: list[str], point: tuple[Any, ...]) -> str:
    """A sweep point's name: its runs' names without ``_rN``."""
    return run_name(labels, point, 0).removesuffix("_r0")


def parse_repeats(raw: dict[str, Any], names: list[str]) -> dict[str, int]:
    """``[sweep_repeat]``: point name -> its repetitions; every name must be a point of the sweep."""
    table = raw.get("sweep_repeat", {})
    if not isinstance(table, dict):
        raise ConfigError("sweep_repeat", 'expected a table of "point name" = repetitions')
    out = {}
    for name, count in table.items():
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; points: {', '.join(names)}"
            raise ConfigError(f"sweep_repeat.{name}", f"no such sweep point (a run name without _rN){hint}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"sweep_repeat.{name}", f"expected a number of repetitions >= 1, got {count!r}")
        out[name] = count
    return out


BLOCK_SOURCES = ("repetition",)


def parse_block_keys(raw: dict[str, Any]) -> list[str]:
    """``[sweep_block]``: the dotted keys that take the block's number (see the module docstring)."""
    table = raw.get("sweep_block", {})
    if not isinstance(table, dict):
        raise ConfigError("sweep_block", 'expected a table of "dotted.key" = "repetition"')
    for key, source in table.items():
        if source not in BLOCK_SOURCES:
            raise ConfigError(f"sweep_block.{key}", f'expected "repetition" (the block\'s number), got {source!r}')
    return list(table)


def _resolve(raw: dict[str, Any], axes: list[Axis], point: tuple[Any, ...], block_keys: list[str],
             repetition: int) -> Experiment:
    resolved = copy.deepcopy(raw)
    for table in ("sweep", "sweep_repeat", "sweep_block"):
        resolved.pop(table, None)
    for axis, value in zip(axes, point, strict=False):
        for key in axis.keys:
            set_path(resolved, key, value, origin=f"sweep.{axis.key}")
    for key in block_keys:
        set_path(resolved, key, repetition, origin=f"sweep_block.{key}")
    return parse_experiment(resolved)


def expand(raw: dict[str, Any], *, repetitions: int | None = None) -> list[RunSpec]:
    """Every run of the experiment, validated, in the sweep's run order (blocks of repetitions, shuffled)."""
    axes = parse_axes(raw)
    labels = _labels(axes)
    block_keys = parse_block_keys(raw)
    points = [(point, _resolve(raw, axes, point, block_keys, 1))
              for point in itertools.product(*(axis.values for axis in axes))]
    repeats = parse_repeats(raw, [point_name(labels, point) for point, _ in points])

    def count(point: tuple[Any, ...], exp: Experiment) -> int:
        return max(repetitions or exp.repetitions, repeats.get(point_name(labels, point), 0))

    runs: list[RunSpec] = []
    for rep in range(1, max(count(point, exp) for point, exp in points) + 1):
        block = [(point, exp) for point, exp in points if rep <= count(point, exp)]
        random.Random(f"{points[0][1].seed}/{rep}").shuffle(block)
        for point, exp in block:
            if block_keys and 1 < rep <= (repetitions or exp.repetitions):  # beyond: [sweep_repeat]'s A/A copies
                exp = _resolve(raw, axes, point, block_keys, rep)
            runs.append(RunSpec(name=run_name(labels, point, rep), repetition=rep, position=len(runs) + 1,
                                point=tuple(zip((a.key for a in axes), point, strict=False)), experiment=exp))
    return runs


def apply_paper(raw: dict[str, Any]) -> dict[str, Any]:
    """``--paper``: apply the file's ``[paper]`` table (``"dotted.key" = value``), the paper's full sweep.

    Its ``[paper.sweep]`` table replaces (or adds) sweep axes: ``"links.x.trace" = [...]``; its
    ``[paper.sweep_repeat]`` table replaces (or adds) points' repetition counts.
    """
    paper = raw.get("paper")
    if not isinstance(paper, dict) or not paper:
        raise ConfigError("paper", "--paper needs a [paper] table of \"dotted.key\" = value overrides in the "
                                   "experiment file (this one has none)")
    out = copy.deepcopy(raw)
    for key, value in paper.items():
        if key in ("sweep", "sweep_repeat") and isinstance(value, dict):
            out[key] = {**(out.get(key) or {}), **copy.deepcopy(value)}
            continue
        if key.split(".")[0] not in ("experiment", "nodes", "links", "apps", "firewalls"):
            raise ConfigError(f"paper.{key}", "expected a key under experiment, nodes, links, apps or firewalls")
        set_path(out, key, value, origin=f"paper.{key}")
    return out


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
