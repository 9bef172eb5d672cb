"""Which programs start warm (net.warm): only ``python -m`` of this interpreter, and per app kind exactly the
modules its launcher runs."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
from typing import Any

import pytest

from nest_experiments.apps import dash, objects
from nest_experiments.config import APP_KINDS, parse_experiment
from nest_experiments.dash import players
from nest_experiments.net.warm import warm_module


def test_only_our_interpreter_running_a_module_starts_warm() -> None:
    assert warm_module([sys.executable, "-m", "nest_experiments.dash.origin.server", "--port-h2", "0"]) == \
        "nest_experiments.dash.origin.server"
    assert warm_module([sys.executable, "-m", "nest_experiments.dash.players.client"]) == "nest_experiments.dash.players.client"
    assert warm_module(["python3", "-m", "nest_experiments.dash.origin.server"]) is None  # another interpreter
    assert warm_module([sys.executable, "script.py"]) is None
    assert warm_module([sys.executable, "-m"]) is None
    assert warm_module(["env", "GOMAXPROCS=1", "caddy", "run"]) is None


def _apps(kind: str, **app: Any) -> Any:
    raw = {"experiment": {"name": "w", "topology": "dumbbell", "duration": "30s"},
           "apps": {"a": {"kind": kind, "server": "s1", "client": "h1", **app}}}
    (cfg,) = parse_experiment(raw).apps
    return APP_KINDS[kind].launcher_class().warm_modules(cfg)


@pytest.mark.parametrize(("app", "modules"), [
    ({}, (dash.SERVER_MODULE, "nest_experiments.dash.players.client")),
    ({"transport": "h3", "http_server": "caddy"}, ("nest_experiments.dash.players.client",)),
    ({"player": "dashjs", "transport": "h3", "http_server": "caddy"}, ()),  # a browser starts cold
    ({"player": "dashjs", "transport": "h3"}, (dash.SERVER_MODULE,)),
    ({"player": "firefox", "transport": "h3", "http_server": "caddy"}, ()),
    ({"player": "gpac", "transport": "h2"}, (dash.SERVER_MODULE,)),
])
def test_a_dash_app_warms_our_server_unless_caddy_serves_and_our_player(app: dict[str, Any],
                                                                          modules: tuple[str, ...]) -> None:
    assert _apps("dash", **app) == modules


def test_an_objects_app_warms_its_downloader_and_our_server_when_it_serves() -> None:
    assert _apps("objects", transport="h3") == (objects.CLIENT_MODULE,)
    assert _apps("objects", transport="h3", http_server="nest") == (dash.SERVER_MODULE, objects.CLIENT_MODULE)


@pytest.mark.parametrize("kind", sorted(APP_KINDS))
def test_the_warm_modules_are_the_ones_the_launcher_runs(kind: str) -> None:
    """The modules a launcher starts as ``[sys.executable, "-m", MODULE, ...]`` are named in its constants, and
    each is a module with a ``__main__`` guard (what runpy runs in a warm process)."""
    cls = APP_KINDS[kind].launcher_class()
    module = inspect.getmodule(cls)
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    run: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.List) and len(node.elts) >= 3 and ast.unparse(node.elts[0]) == "sys.executable" \
                and isinstance(node.elts[1], ast.Constant) and node.elts[1].value == "-m":
            arg = node.elts[2]  # a name of the module's, or a table of them looked up by the config
            if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name):
                run.update(vars(module)[arg.value.id].values())
            elif ast.unparse(arg) == "players.KINDS[c.player].module":  # the player's record names its process
                run.update(k.module for k in players.KINDS.values())
            else:
                assert isinstance(arg, ast.Name), f"{ast.unparse(arg)}: name the module in a constant"
                run.add(vars(module)[arg.id])
    declared = {dash.SERVER_MODULE, *(k.module for k in players.KINDS.values())} if cls is dash.Dash else \
        {dash.SERVER_MODULE, objects.CLIENT_MODULE} if cls is objects.Objects else set()
    assert run == declared
    for name in run:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        assert 'if __name__ == "__main__":' in open(spec.origin).read()


def test_a_warm_program_ends_with_the_status_sys_exit_gives(capsys: pytest.CaptureFixture[str]) -> None:
    from nest_experiments.net.warm import exit_status

    assert [exit_status(code) for code in (None, 0, 3, 256 + 2, -1)] == [0, 0, 3, 2, 255]
    assert exit_status("error: no segment") == 1 and capsys.readouterr().err == "error: no segment\n"
