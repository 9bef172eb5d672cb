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
``nest_router_guest``
    (session) under ``--nest-runtime router``, the router guest ``nest_network`` sends links through; None
    otherwise.

Markers
-------
``@pytest.mark.nest_integration``: the test builds real namespaces: skipped without root.
``@pytest.mark.nest_vm`` (or ``nest_vm("pie", ...)``: the features it needs; default pie, fq_pie and netem):
skipped on a kernel without them, with the reason and the fix (``--nest-runtime router`` or ``vm``).

Strict mode
-----------
``NEST_EXP_STRICT=1`` makes each of these skips a failure: a skipped test must not pass for a tested one (this
project's CI sets it, in ``.ci/run``). ``CI=true`` alone does not: every CI service sets it, also for other projects
whose tests use this plugin and may skip. ``0`` (or unset) is the default; another value is a usage error.
A test of yours that cannot run for a reason of its own (a tool missing) joins in with
``nest_experiments.pytest_plugin.skip_or_fail(reason)``.

Options
-------
``--nest-runtime router``: the tests run on the host as always, and each link a ``nest_network`` shapes with a
qdisc the host lacks (pie, fq_pie, netem, codel, fq_codel, cake) goes through one qemu guest that only forwards
(the router runtime, booted when the session's first such network is built and shut down at its end); a
``nest_vm`` test needing only such qdiscs then runs. The qdiscs live in the guest: read them through
``net.qdiscs``, ``net.htb_rate_bps`` and ``net.read_back``, not with a ``tc`` of your own on the node.
``--nest-runtime vm`` runs the whole pytest session inside the VM runtime (a stock Debian kernel, for kernels
without pie/fq_pie/netem), with the project's folder (pytest's rootdir) writable in the guest.
"""

from __future__ import annotations

import contextlib
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
VM_HINT = f"run pytest with {OPTION} router (the qdiscs through a guest) or {OPTION} vm (the whole session in one)"
ROUTER = "router"
ROUTER_SLOTS = 2  # links per network through the guest at first (the default topology's two bottlenecks)


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
    group.addoption(OPTION, choices=("auto", "host", ROUTER, "vm"), default="auto",
                    help="router: links needing qdiscs this kernel lacks go through one qemu guest; vm: run the "
                         "whole session inside the nest_experiments VM (a kernel with pie/fq_pie/netem)")


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
        missing_features(tuple(vm.args) or VM_FEATURES, routed=item.config.getoption(OPTION) == ROUTER)


def missing_features(features: tuple[str, ...], *, routed: bool = False) -> None:
    """Skip (strict: fail) unless the kernel has every one of ``features`` (``routed``: or the router guest
    gives it to the networks' links)."""
    from nest_experiments.net.kernel import FEATURES, probe_feature
    from nest_experiments.net.routed import ROUTABLE

    unknown = [f for f in features if f not in FEATURES]
    if unknown:
        pytest.fail(f"{VM}: unknown kernel feature {', '.join(map(repr, unknown))}; known: {', '.join(FEATURES)}",
                    pytrace=False)
    missing = [f for f in features if not probe_feature(f).ok and not (routed and f in ROUTABLE)]
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
        """The kernel's qdiscs on ``node``'s end of ``link`` (``tc -j qdisc show``), root first: the router
        guest's, for a link through it."""
        import json

        routed = self._routed(link, node)
        if routed is not None:
            return list(json.loads(self.net.router.call("show", args=["qdisc", "show", "dev", routed.plan.dev])["out"]))
        dev = self.spec.link(link).ifname(node)
        return list(json.loads(self.run(node, ["tc", "-j", "qdisc", "show", "dev", dev]).stdout))

    def htb_rate_bps(self, link: str, node: str) -> int | None:
        """The rate of the HTB class shaping ``node``'s end of ``link``, as the kernel reports it (None: no HTB)."""
        from nest_experiments.net.tcplan import parse_htb_classes

        egress = self.egress(link, node)
        if egress.plan.htb_class is None:
            return None
        if egress.routed:
            classes = self.net.router.call("classes", devs=[egress.plan.dev])["classes"].get(egress.plan.dev, {})
            found = classes.get(egress.plan.htb_class)
            return None if found is None else int(found["rate_bps"])
        text = self.run(node, ["tc", "class", "show", "dev", egress.dev]).stdout
        return parse_htb_classes(text).get(egress.plan.htb_class)

    def read_back(self) -> None:
        """Every shaped egress as planned (qdiscs, their flags, HTB rates; in the router guest too);
        NetworkSetupError says what differs."""
        by_ns: dict[str, list[Any]] = {}
        for e in self.net.egresses:
            by_ns.setdefault("" if e.routed else e.ns, []).append(e.plan)  # "": the router guest's
        for ns, plans in by_ns.items():
            if ns:
                self.net.read_back(*plans)
            else:
                self.net.read_back_guest(plans)

    def _routed(self, link: str, node: str) -> Any | None:
        found = [e for e in self.net.egresses if e.link == link and e.node == node and e.routed]
        return found[0] if found else None


@pytest.fixture
def nest_require_features(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``nest_require_features("pie", "netem")``: skip (strict: fail) unless the kernel has them (under
    ``--nest-runtime router``: or the router guest gives them to ``nest_network``'s links)."""
    routed = request.config.getoption(OPTION) == ROUTER

    def check(*features: str) -> None:
        missing_features(features, routed=routed)

    return check


class RouterGuest:
    """``--nest-runtime router``: the session's one router guest, booted when a network first has a link that
    needs it (again, with more slots, when a network needs more links through it than it has) and shut down when
    the session ends."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.guest: Any = None
        self.slots = 0

    def for_links(self, links: Sequence[Any]) -> Any:
        """The guest for a network with ``links`` (LinkConfig), or None when none of them needs it."""
        from nest_experiments.net.routed import routed_count

        missing = runtime.routable_missing()
        need = routed_count(links, missing)
        if need == 0:
            return None
        if self.guest is None or need > self.slots:
            self.close()
            self.slots = max(need, ROUTER_SLOTS)
            self.guest = self._stack.enter_context(runtime.router_guest(slots=self.slots, missing=missing))
        return self.guest

    def close(self) -> None:
        self._stack.close()
        self._stack, self.guest, self.slots = contextlib.ExitStack(), None, 0


@pytest.fixture(scope="session")
def nest_router_guest(request: pytest.FixtureRequest) -> Iterator[RouterGuest | None]:
    """The session's :class:`RouterGuest` under ``--nest-runtime router`` (else None): ``nest_network`` uses it."""
    if request.config.getoption(OPTION) != ROUTER:
        yield None
        return
    holder = RouterGuest()
    try:
        yield holder
    finally:
        holder.close()


@pytest.fixture
def nest_network(nest_router_guest: RouterGuest | None) -> Iterator[Callable[..., TestNetwork]]:
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
        net = _make_network(topology, links or {}, congestion_control, firewalls or {}, nest_router_guest)
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


def _make_network(topology: str | topo.TopologySpec, links: dict[str, Any], cc: str, firewalls: dict[str, Any],
                  router: RouterGuest | None = None) -> Any:
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
        return Network(topology, exp_links, state=RunState(prefix=new_prefix()), congestion_control=cc,
                       router=router.for_links(exp_links) if router else None)
    exp = parse_experiment(raw)
    return Network(exp.topology, exp.links, state=RunState(prefix=new_prefix()), congestion_control=cc,
                   firewalls=exp.firewalls, router=router.for_links(exp.links) if router else None)


def _links_for_spec(spec: topo.TopologySpec, links: dict[str, Any]) -> tuple[Any, ...]:
    from nest_experiments.config import _parse_link

    return tuple(_parse_link(link, links.get(link.name, {}), f"links.{link.name}") for link in spec.links)
