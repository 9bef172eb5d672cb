"""pytest plugin: tests inside real network namespaces, for our tests and for any project (installed with the
package; pytest loads it by its ``pytest11`` entry point). Its names all start with ``nest``, so it imposes
nothing on a project's own markers and options.

Fixtures
--------
``nest_network``
    A factory: ``net = nest_network("dumbbell", links={"bottleneck": {"rate": "10mbit"}})``
    builds the topology (a name of a shipped topology, ``topologies/NAME.toml``, or a
    :class:`~nest_experiments.config.topology.TopologySpec`, e.g. from
    :func:`~nest_experiments.config.topology.parse`) with our traffic-control
    adapter (``firewalls={"udp443": {"router": "r1", "port": 443, "rate": "64kbit"}}``:
    ``[firewalls.NAME]`` tables, named topologies only), and tears everything down when the test ends, passed or
    failed. It needs root (else the test is skipped; in strict mode it fails). ``net.run(node, argv)`` runs a
    command in a node, ``net.popen(...)`` starts one, ``net.addr(node)`` is a node's address,
    ``net.qdiscs(link, node)`` and ``net.htb_rate_bps(link, node)`` read the kernel's traffic control on a node's
    end of a link back, ``net.read_back()`` checks every shaped egress against its plan.
``nest_require_features``
    ``nest_require_features("pie", "netem")``: skip (or, in strict mode, fail)
    when the kernel lacks them.

Markers
-------
``@pytest.mark.nest_integration``: the test builds real namespaces: skipped without root.
``@pytest.mark.nest_vm`` (or ``nest_vm("pie", ...)``: the features it needs; default pie, fq_pie and netem):
skipped on a kernel without them, with the reason and the fix (``--nest-runtime vm``).

Strict mode
-----------
``NEST_EXP_STRICT=1`` makes each of these skips a failure: a skipped test must not pass for a tested one (this
project's CI sets it, in ``.ci/run``). ``CI=true`` alone does not: every CI service sets it, also for other projects
whose tests use this plugin and may skip. ``0`` (or unset) is the default; another value is a usage error.
A test of yours that cannot run for a reason of its own (a tool missing) joins in with
``nest_experiments.pytest_plugin.skip_or_fail(reason)``.

Option
------
``--nest-runtime vm`` runs the whole pytest session inside the VM runtime (a stock Debian kernel, for kernels
without pie/fq_pie/netem), with the project's folder (pytest's rootdir) writable in the guest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from nest_experiments.config import topology as topo
from nest_experiments.errors import ConfigError
from nest_experiments.net.procs import ns_exec
from nest_experiments.runs import runtime

OPTION = "--nest-runtime"
INTEGRATION = "nest_integration"
VM = "nest_vm"
VM_FEATURES = ("pie", "fq_pie", "netem")
VM_HINT = f"run pytest with {OPTION} vm"


STRICT_ENV = "NEST_EXP_STRICT"


def strict() -> bool:
    """Strict mode (``NEST_EXP_STRICT``: 1 or 0, also on/off, yes/no, true/false; unset: 0): a test that cannot
    run here fails instead of being skipped. ``CI`` counts for nothing: every CI service sets it."""
    value = os.environ.get(STRICT_ENV, "").strip().lower()
    if value in ("1", "on", "yes", "true"):
        return True
    if value in ("", "0", "off", "no", "false"):
        return False
    raise ConfigError(STRICT_ENV, f"{value!r} is neither 1 nor 0 (strict mode: a test that cannot run fails)")


def skip_or_fail(reason: str) -> NoReturn:
    """Skip a test that cannot run here; in strict mode (``NEST_EXP_STRICT=1``) that is a failure."""
    if strict():
        pytest.fail(f"cannot run here ({STRICT_ENV}=1: a skip is a failure): {reason}", pytrace=False)
    pytest.skip(reason)


def require_quicgo(client: str) -> None:
    """For an ``h3_client``: quic-go's fetcher must be built (setup.sh does, with Go >= 1.26); else skip (strict: fail)."""
    if client == "quic-go":
        from nest_experiments.dash.http.quicgo import binary
        from nest_experiments.errors import MissingToolError

        try:
            binary()
        except MissingToolError as exc:
            skip_or_fail(str(exc))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nest_experiments")
    group.addoption(OPTION, choices=("auto", "host", "vm"), default="auto",
                    help="vm: run the whole session inside the nest_experiments VM (a kernel with pie/fq_pie/netem)")


def pytest_configure(config: pytest.Config) -> None:
    try:
        strict()  # a mistyped NEST_EXP_STRICT stops the session before any test, not in the first that skips
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.addinivalue_line("markers", f"{INTEGRATION}: builds real network namespaces (needs root)")
    config.addinivalue_line("markers", f"{VM}(*features): needs a kernel with these (default {', '.join(VM_FEATURES)}); "
                                       f"{OPTION} vm provides one")


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption(OPTION) != "vm" or runtime.current() == "vm":
        return None
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *_without_runtime(list(config.invocation_params.args))]
    result = runtime.enter_vm(argv, rw_dirs=[Path(config.rootpath)], timeout_s=3600, keep_env=("CI", STRICT_ENV))
    return result.exit_code


def _without_runtime(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == OPTION:
            skip = True
        elif not arg.startswith(f"{OPTION}="):
            out.append(arg)
    return out


def pytest_runtest_setup(item: pytest.Item) -> None:
    vm = item.get_closest_marker(VM)
    if (item.get_closest_marker(INTEGRATION) or vm) and os.geteuid() != 0:
        skip_or_fail("needs root (network namespaces)")
    if vm:
        missing_features(tuple(vm.args) or VM_FEATURES)


def missing_features(features: tuple[str, ...]) -> None:
    """Skip (strict: fail) unless the kernel has every one of ``features``."""
    from nest_experiments.net.kernel import FEATURES, probe_feature

    unknown = [f for f in features if f not in FEATURES]
    if unknown:
        pytest.fail(f"{VM}: unknown kernel feature {', '.join(map(repr, unknown))}; known: {', '.join(FEATURES)}",
                    pytrace=False)
    missing = [f for f in features if not probe_feature(f).ok]
    if missing:
        skip_or_fail(f"kernel lacks {', '.join(missing)}: {VM_HINT}")


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
        """``node``'s shaped end of ``link`` (``.dev``, ``.ns``, ``.plan``: what was installed)."""
        found = [e for e in self.net.egresses if e.link == link and e.node == node]
        if not found:
            shaped = ", ".join(f"{e.link}/{e.node}" for e in self.net.egresses) or "none"
            raise KeyError(f"no shaped egress {link}/{node} (shaped: {shaped})")
        return found[0]

    def qdiscs(self, link: str, node: str) -> list[dict[str, Any]]:
        """The kernel's qdiscs on ``node``'s end of ``link`` (``tc -j qdisc show``), root first."""
        import json

        dev = self.spec.link(link).ifname(node)
        return list(json.loads(self.run(node, ["tc", "-j", "qdisc", "show", "dev", dev]).stdout))

    def htb_rate_bps(self, link: str, node: str) -> int | None:
        """The rate of the HTB class shaping ``node``'s end of ``link``, as the kernel reports it (None: no HTB)."""
        from nest_experiments.net.tcplan import parse_htb_classes

        egress = self.egress(link, node)
        if egress.plan.htb_class is None:
            return None
        text = self.run(node, ["tc", "class", "show", "dev", egress.dev]).stdout
        return parse_htb_classes(text).get(egress.plan.htb_class)

    def read_back(self) -> None:
        """Every shaped egress as planned (qdiscs, their flags, HTB rates); NetworkSetupError says what differs."""
        by_ns: dict[str, list[Any]] = {}
        for e in self.net.egresses:
            by_ns.setdefault(e.ns, []).append(e.plan)
        for plans in by_ns.values():
            self.net.read_back(*plans)


@pytest.fixture
def nest_require_features() -> Callable[..., None]:
    """``nest_require_features("pie", "netem")``: skip (strict: fail) unless the kernel has them."""
    def check(*features: str) -> None:
        missing_features(features)

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
