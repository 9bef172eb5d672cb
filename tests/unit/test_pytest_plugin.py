"""The pytest plugin's own decisions, without namespaces: its fixtures' names, and strict mode (``NEST_EXP_STRICT``,
never ``CI``) turning a skip into a failure, on the host and in the VM it re-enters."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from _pytest.fixtures import FixtureFunctionDefinition

from nest_experiments import pytest_plugin as plugin
from nest_experiments.errors import ConfigError
from nest_experiments.net import kernel
from nest_experiments.runs import runtime


@pytest.fixture
def no_strict_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This project's CI sets NEST_EXP_STRICT and CI: each test sets what it is about."""
    monkeypatch.delenv(plugin.STRICT_ENV, raising=False)
    monkeypatch.delenv("CI", raising=False)
    return monkeypatch


def test_every_fixture_of_the_plugin_has_the_nest_prefix() -> None:
    fixtures = {name for name, obj in vars(plugin).items() if isinstance(obj, FixtureFunctionDefinition)}
    assert fixtures == {"nest_network", "nest_require_features", "nest_router_guest"}  # require_features was renamed, no alias kept


def test_strict_when_its_own_variable_says_so(no_strict_env: pytest.MonkeyPatch) -> None:
    assert plugin.STRICT_ENV == "NEST_EXP_STRICT"
    assert plugin.strict() is False  # unset
    for on in ("1", "true", "yes", "on", " 1 "):
        no_strict_env.setenv(plugin.STRICT_ENV, on)
        assert plugin.strict() is True, on
    for off in ("0", "false", "no", "off", ""):
        no_strict_env.setenv(plugin.STRICT_ENV, off)
        assert plugin.strict() is False, off


def test_ci_true_alone_is_not_strict(no_strict_env: pytest.MonkeyPatch) -> None:
    no_strict_env.setenv("CI", "true")  # what every CI service sets, also for other projects using the plugin
    assert plugin.strict() is False
    with pytest.raises(pytest.skip.Exception, match="^no gpac$"):
        plugin.skip_or_fail("no gpac")
    no_strict_env.setenv(plugin.STRICT_ENV, "0")  # and an explicit 0 beats it too
    assert plugin.strict() is False


def test_in_strict_mode_a_skip_is_a_failure_naming_the_reason(no_strict_env: pytest.MonkeyPatch) -> None:
    no_strict_env.setenv(plugin.STRICT_ENV, "1")
    with pytest.raises(pytest.fail.Exception) as failed:
        plugin.skip_or_fail("gpac not installed")
    assert str(failed.value) == "cannot run here (NEST_EXP_STRICT=1: a skip is a failure): gpac not installed"


def test_a_missing_kernel_feature_skips_or_fails_by_the_same_rule(no_strict_env: pytest.MonkeyPatch) -> None:
    no_strict_env.setattr(kernel, "probe_feature", lambda name: kernel.Probe(name != "pie", "sch_pie"))
    no_strict_env.setenv("CI", "true")
    with pytest.raises(pytest.skip.Exception, match=r"^kernel lacks pie: run pytest with --nest-runtime router \(.*"
                                                    r"or --nest-runtime vm \(.*\)$"):
        plugin.missing_features(("netem", "pie"))
    no_strict_env.setenv(plugin.STRICT_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=r"NEST_EXP_STRICT=1: a skip is a failure\): kernel lacks pie:"):
        plugin.missing_features(("netem", "pie"))
    plugin.missing_features(("netem",))  # nothing missing: neither


def test_a_mistyped_strict_variable_stops_the_session(no_strict_env: pytest.MonkeyPatch) -> None:
    no_strict_env.setenv(plugin.STRICT_ENV, "ture")
    with pytest.raises(ConfigError, match="^NEST_EXP_STRICT: 'ture' is neither 1 nor 0"):
        plugin.strict()
    with pytest.raises(pytest.UsageError, match="NEST_EXP_STRICT: 'ture'"):
        plugin.pytest_configure(cast(pytest.Config, SimpleNamespace()))  # checked before anything is declared


def test_the_vm_session_inherits_strict_mode(no_strict_env: pytest.MonkeyPatch) -> None:
    """``--nest-runtime vm`` re-runs pytest in the guest, where the skips are decided: the variable goes with it."""
    entered: dict[str, Any] = {}

    def enter_vm(argv: list[str], **kwargs: Any) -> SimpleNamespace:
        entered.update(argv=argv, **kwargs)
        return SimpleNamespace(exit_code=0)

    no_strict_env.setattr(runtime, "current", lambda: "host")
    no_strict_env.setattr(runtime, "enter_vm", enter_vm)
    no_strict_env.setenv(plugin.STRICT_ENV, "1")
    config = SimpleNamespace(getoption=lambda name: "vm", rootpath=Path("/project"),
                             invocation_params=SimpleNamespace(args=("-m", "vm", "--nest-runtime", "vm")))
    assert plugin.pytest_cmdline_main(cast(pytest.Config, config)) == 0
    assert plugin.STRICT_ENV in entered["keep_env"]
    assert entered["argv"][-2:] == ["-m", "vm"]  # the option itself is not passed on
    assert runtime.guest_env({}, keep=entered["keep_env"])[plugin.STRICT_ENV] == "1"
