"""pytest plugin: tests inside real network namespaces, for our tests and for users.

Fixtures
--------
``nest_network``
    A factory: ``net = nest_network("dumbbell", links={"bottleneck": {"rate": "10mbit"}})``
    builds the topology (a name in ``topologies/`` or a
    :class:`~nest_experiments.config.topology.TopologySpec`) with our traffic-control
    adapter (``firewalls={"udp443": {"router": "r1", "port": 443, "rate": "64kbit"}}``:
    ``[firewalls.NAME]`` tables, named topologies only), and tears everything down when the test ends, passed or failed.
    ``net.run(node, argv)`` runs a command in a node, ``net.popen(...)`` starts
    one, ``net.addr(node)`` is a node's address.
``require_features``
    ``require_features("pie", "netem")``: skip (or, under ``CI=true``, fail)
    when the kernel lacks them.

Option ``--runtime vm`` runs the whole pytest session inside the VM runtime
(for kernels without pie/fq_pie/netem); ``@pytest.mark.vm`` tests are
skipped on such kernels otherwise — and fail under ``CI=true``, where a
skipped test must not pass for a tested one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.config import topology as topo
from nest_experiments.net.procs import ns_exec
from nest_experiments.runs import runtime

IN_CI = os.environ.get("CI", "").lower() == "true"


def skip_or_fail(reason: str) -> None:
    """Skip a test that cannot run here; under CI=true that is a failure."""
    if IN_CI:
        pytest.fail(f"cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def require_quicgo(client: str) -> None:
    """For an ``h3_client``: quic-go's fetcher must be built (setup.sh does, with Go >= 1.26); else skip (CI: fail)."""
    if client == "quic-go":
        from nest_experiments.dash.quicgo import binary
        from nest_experiments.errors import MissingToolError

        try:
            binary()
        except MissingToolError as exc:
            skip_or_fail(str(exc))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nest_experiments")
    group.addoption("--runtime", choices=("auto", "host", "vm"), default="auto",
                    help="vm: run the whole session inside the nest_experiments VM")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: builds real network namespaces (needs root)")
    config.addinivalue_line("markers", "vm: needs a kernel with pie/fq_pie/netem (the VM runtime here)")


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption("runtime") != "vm" or runtime.current() == "vm":
        return None
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *_without_runtime(list(config.invocation_params.args))]
    result = runtime.enter_vm(argv, rw_dirs=[Path(config.rootpath)], timeout_s=3600, keep_env=("CI",))
    return result.exit_code


def _without_runtime(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--runtime":
            skip = True
        elif not arg.startswith("--runtime="):
            out.append(arg)
    return out




def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("integration") or item.get_closest_marker("vm"):
        if os.geteuid() != 0:
            skip_or_fail("needs root (network namespaces)")
    if item.get_closest_marker("vm"):
        from nest_experiments.net.kernel import probe_feature

        missing = [f for f in ("pie", "fq_pie", "netem") if not probe_feature(f).ok]
        if missing:
            skip_or_fail(f"kernel lacks {', '.join(missing)}: run with --runtime vm")


class TestNetwork:
    """What ``nest_network`` returns: a realised topology plus helpers."""

    def __init__(self, net: Any) -> None:
        self.net = net
        self.spec: topo.TopologySpec = net.spec

    def ns(self, node: str) -> str:
        return str(self.net.ns(node))

    def addr(self, node: str) -> str:
        return str(self.net.addr(node))

    def run(self, node: str, argv: Sequence[str], *, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(ns_exec(self.ns(node), argv), capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{node}: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def popen(self, node: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        from nest_experiments.net.procs import popen_in_ns

        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        return popen_in_ns(self.ns(node), argv, **kwargs)

    def egress(self, link: str, node: str) -> Any:
        return next(e for e in self.net.egresses if e.link == link and e.node == node)


@pytest.fixture
def require_features() -> Callable[..., None]:
    def check(*features: str) -> None:
        from nest_experiments.net.kernel import probe_feature

        missing = [f for f in features if not probe_feature(f).ok]
        if missing:
            skip_or_fail(f"kernel lacks {', '.join(missing)}: run with --runtime vm")

    return check


@pytest.fixture
def nest_network() -> Iterator[Callable[..., TestNetwork]]:
    from nest_experiments.net.procs import clean_dead_runs, run_lock

    built: list[Any] = []
    lock = run_lock()
    locked = False

    def build(topology: str | topo.TopologySpec, *, links: dict[str, Any] | None = None,
              congestion_control: str = "cubic", firewalls: dict[str, Any] | None = None) -> TestNetwork:
        if os.geteuid() != 0:
            skip_or_fail("needs root (network namespaces)")
        nonlocal locked
        if not locked:
            lock.__enter__()
            locked = True
            clean_dead_runs()
        net = _make_network(topology, links or {}, congestion_control, firewalls or {})
        built.append(net)
        net.__enter__()
        return TestNetwork(net)

    try:
        yield build
    finally:
        for net in reversed(built):
            net.teardown()
        if locked:
            lock.__exit__(None, None, None)


def _make_network(topology: str | topo.TopologySpec, links: dict[str, Any], cc: str, firewalls: dict[str, Any]) -> Any:
    from nest_experiments.config import parse_experiment
    from nest_experiments.net.network import Network
    from nest_experiments.net.procs import RunState, new_prefix

    name = topology if isinstance(topology, str) else topology.name
    raw = {"experiment": {"name": "pytest", "topology": name, "duration": "1s"}, "links": links}
    if firewalls:
        raw["firewalls"] = firewalls
    if isinstance(topology, topo.TopologySpec):
        if firewalls:
            raise ValueError("firewalls need a named topology (topologies/NAME.toml)")
        exp_links = _links_for_spec(topology, links)
        return Network(topology, exp_links, state=RunState(prefix=new_prefix()), congestion_control=cc)
    exp = parse_experiment(raw)
    return Network(exp.topology, exp.links, state=RunState(prefix=new_prefix()), congestion_control=cc,
                   firewalls=exp.firewalls)


def _links_for_spec(spec: topo.TopologySpec, links: dict[str, Any]) -> tuple[Any, ...]:
    from nest_experiments.config import _parse_link

    return tuple(_parse_link(link, links.get(link.name, {}), f"links.{link.name}") for link in spec.links)
