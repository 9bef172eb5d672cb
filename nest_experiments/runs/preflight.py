"""The checks of this machine that run before any namespace or VM exists (the config itself is pure): what
each app kind needs here (config.kinds: a DASH player and its tools), each refused in one line naming the key
and the fix, as a config error is."""

from __future__ import annotations

from collections.abc import Sequence

from nest_experiments.config import APP_KINDS, Experiment
from nest_experiments.config.sweep import RunSpec
from nest_experiments.errors import ConfigError


def machine_problems(exp: Experiment) -> list[tuple[str, str]]:
    """(key, why and how to fix it) for every app of ``exp`` this machine cannot run."""
    found = (APP_KINDS[app.kind].check_machine(app) for app in exp.apps)
    return [p for p in found if p is not None]


def preflight(runs: Sequence[RunSpec]) -> None:
    """Raise :class:`ConfigError` for the first thing this machine lacks for ``runs``."""
    for run in runs:
        for key, why in machine_problems(run.experiment):
            raise ConfigError(key, why)
