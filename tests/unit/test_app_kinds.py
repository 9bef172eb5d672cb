"""The app-kind registry (config.kinds): each kind declared once, and each declaration true of the code."""

from __future__ import annotations

import ast
import inspect
import typing

import pytest

from nest_experiments.apps.base import App
from nest_experiments.config import APP_KINDS, parse_experiment
from nest_experiments.errors import ConfigError


@pytest.mark.parametrize("kind", sorted(APP_KINDS))
def test_the_launcher_is_an_app_of_the_kinds_config(kind: str) -> None:
    k = APP_KINDS[kind]
    cls = k.launcher_class()
    assert issubclass(cls, App) and cls is not App
    assert typing.get_type_hints(cls)["cfg"] is k.config


@pytest.mark.parametrize("kind", sorted(APP_KINDS))
def test_the_collectors_declared_are_the_ones_the_launcher_imports(kind: str) -> None:
    k = APP_KINDS[kind]
    tree = ast.parse(inspect.getsource(inspect.getmodule(k.launcher_class())))  # type: ignore[arg-type]
    used = {node.module.split(".")[2] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nest_experiments.collectors.")}
    # apps.base's socket sampler (collectors.subflows), started by the launcher's call of sample_sockets
    if any(isinstance(node, ast.Attribute) and node.attr == "sample_sockets" for node in ast.walk(tree)):
        used.add("subflows")
    assert used == set(k.collectors)


def test_an_unknown_kind_lists_the_registry() -> None:
    raw = {"experiment": {"name": "k", "topology": "dumbbell", "duration": "5s"},
           "apps": {"a": {"kind": "ftp", "src": "h1", "dst": "s1"}}}
    with pytest.raises(ConfigError) as err:
        parse_experiment(raw)
    assert err.value.path == "apps.a.kind" and all(kind in str(err.value) for kind in APP_KINDS)


@pytest.mark.parametrize("kind", sorted(APP_KINDS))
def test_the_limits_declared_are_the_ones_the_parser_checks(kind: str) -> None:
    k = APP_KINDS[kind]
    source = inspect.getsource(inspect.getmodule(k.parse))  # type: ignore[arg-type]
    assert {key for key in k.limits if f'["{key}"]' not in source} == set()
