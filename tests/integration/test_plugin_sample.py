"""The pytest plugin from another project's side: a conftest-less test file in an empty temporary folder, run by
pytest in a fresh interpreter (pytester's subprocess), which loads the plugin by its entry point as any project in
the venv would: its own markers and option, a custom TopologySpec, a qdisc read back, a VM-marked test."""

from __future__ import annotations

from pathlib import Path

import pytest

import nest_experiments
from nest_experiments.net.kernel import probe_feature
from nest_experiments.pytest_plugin import STRICT_ENV
from tests.conftest import child_processes

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.integration

SAMPLE = '''
import pytest

from nest_experiments.config import topology

# the sample project's own topology, not a shipped one: a host, a gateway, a server
TRIO = topology.parse("trio", {"nodes": {"cli": "host", "gw": "router", "srv": "host"},
                               "links": {"up": {"a": "cli", "b": "gw"}, "down": {"a": "gw", "b": "srv"}}})


@pytest.mark.nest_integration
def test_custom_topology_is_shaped_as_asked(nest_network):
    net = nest_network(TRIO, links={"down": {"rate": "7mbit", "qdisc": {"kind": "pfifo", "limit": 30}}})
    net.run("cli", ["ping", "-c", "1", "-W", "2", net.addr("srv")])
    assert net.htb_rate_bps("down", "gw") == 7_000_000
    leaf = [q for q in net.qdiscs("down", "gw") if q["kind"] != "htb"]
    assert [(q["kind"], q["options"]["limit"]) for q in leaf] == [("pfifo", 30)]
    net.read_back()


@pytest.mark.nest_vm("pie")
def test_pie_on_the_gateway(nest_network):
    net = nest_network("chain", links={"bottleneck": {"rate": "10mbit", "qdisc": {"kind": "pie", "target": "5ms"}}})
    assert "pie" in [q["kind"] for q in net.qdiscs("bottleneck", "r")]


def test_plain():
    assert True
'''


@pytest.fixture
def sample(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The sample project; its pytest imports the package this session tests (the clone's, or a worktree's)."""
    pytester.makepyfile(test_sample=SAMPLE)
    monkeypatch.setenv("PYTHONPATH", str(Path(nest_experiments.__file__).resolve().parents[1]))
    monkeypatch.delenv(STRICT_ENV, raising=False)  # this project's CI sets it: the sample project's run does not
    monkeypatch.setenv("CI", "true")  # what every CI service sets: not strict mode (and pytest's summary untruncated)
    return pytester


def test_the_plugin_brings_only_its_own_names(sample: pytest.Pytester) -> None:
    markers = sample.runpytest_subprocess("--markers")
    assert markers.ret == 0
    text = markers.stdout.str()
    assert "@pytest.mark.nest_integration:" in text and "@pytest.mark.nest_vm(*features):" in text
    assert "@pytest.mark.integration:" not in text and "@pytest.mark.vm:" not in text
    options = sample.runpytest_subprocess("--help").stdout.str()
    assert "--nest-runtime={auto,host,router,vm}" in options and "--runtime" not in options.replace("--nest-runtime", "")


def test_a_sample_project_tests_its_own_topology(no_leftovers: None, sample: pytest.Pytester) -> None:
    result = sample.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "-rs", "-v")
    if probe_feature("pie").ok:
        result.assert_outcomes(passed=3)
    else:  # this machine's kernel: no pie; outside strict mode (CI=true alone) the VM test is skipped, saying why
        result.assert_outcomes(passed=2, skipped=1)
        result.stdout.fnmatch_lines(["SKIPPED * kernel lacks pie: run pytest with --nest-runtime router *"])
    result.stdout.fnmatch_lines(["*test_custom_topology_is_shaped_as_asked PASSED*"])


@pytest.mark.skipif(probe_feature("pie").ok, reason="the kernel has pie: nothing to skip or fail")
def test_in_strict_mode_the_vm_case_errs_instead_of_skipping(no_leftovers: None, sample: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STRICT_ENV, "1")
    result = sample.runpytest_subprocess("-p", "no:cacheprovider", "-k", "pie")
    result.assert_outcomes(errors=1)  # failed in its setup, before its fixture built anything
    result.stdout.fnmatch_lines(["ERROR *test_pie_on_the_gateway - Failed: cannot run here (NEST_EXP_STRICT=1: a skip "
                                 "is a failure): kernel lacks pie: run pytest with --nest-runtime router *"])



@pytest.mark.skipif(probe_feature("pie").ok, reason="the kernel has pie: no router guest is needed")
def test_with_the_router_runtime_the_vm_case_runs_its_pie_through_one_guest(no_leftovers: None,
                                                                           sample: pytest.Pytester) -> None:
    # the PIE test's network sends its bottleneck through the session's guest (booted once, gone at the end); the
    # custom topology's needs none and stays on the host; net.qdiscs reads the guest's PIE, net.read_back all
    result = sample.runpytest_subprocess("-p", "no:cacheprovider", "--nest-runtime", "router", "-rs", "-v", "-s")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_pie_on_the_gateway PASSED*"])
    assert "router runtime: guest up in" in result.stderr.str() + result.stdout.str()
    assert child_processes() == []  # qemu is gone with the session
