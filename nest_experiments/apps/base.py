"""The application interface: one start/stop object per traffic source.

Life of an app in a run: ``prepare()`` (servers started, before the clock's
traffic phase), ``ready()`` (once every app is prepared: wait until they accept
connections, so that the apps' servers start side by side), ``start()`` at its
``start_s`` on the run clock, ``finish()``
after the run's duration (wait for clients, parse raw logs into the run
folder's CSVs), and ``stop()`` always (idempotent; kills what is left).
"""

from __future__ import annotations

import abc
import csv
import functools
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from nest_experiments.collectors.subflows import FIELDS as SUBFLOW_FIELDS
from nest_experiments.collectors.subflows import SubflowSampler
from nest_experiments.config import AppConfig
from nest_experiments.dash.origin import caddy, certs
from nest_experiments.errors import RunError
from nest_experiments.net.network import Network
from nest_experiments.net.procs import popen_in_ns, stop, wait_exited
from nest_experiments.net.sockets import is_listening
from nest_experiments.net.warm import WarmPool
from nest_experiments.rundir import (
    CADDY_ACCESS_LOG,
    ERR,
    OUT,
    RAW_DIR,
    SERVER,
    SUBFLOWS,
    app_file,
    write_bytes_atomic,
    write_json,
)

SERVER_MODULE = "nest_experiments.dash.origin.server"  # our HTTP server (DASH and objects apps), run as python -m
# how often an app's TCP / MPTCP sockets are read (a process per sample: ~5 ms on the host, more under TCG), by in_vm
SOCKET_INTERVAL_S = {False: 1.0, True: 5.0}


class App(abc.ABC):
    def __init__(self, cfg: AppConfig, *, net: Network, run_dir: Path, clock: Callable[[], float],
                 duration_s: float, in_vm: bool = False) -> None:
        self.cfg = cfg
        self.in_vm = in_vm  # the run is inside the VM runtime's guest (TCG: slower starts; the runner says so)
        self.net = net
        self.run_dir = run_dir
        self.clock = clock
        self.run_duration_s = duration_s
        self.procs: list[subprocess.Popen[bytes]] = []
        self._files: list[IO[bytes]] = []
        self.warnings: list[str] = []
        self.versions: dict[str, str] = {}
        # why this app's traffic measured nothing valid (its client failed), set by finish(): the run then fails
        # with it as its reason (DESIGN §4), after every app's outputs are written
        self.failure: str | None = None
        # called with a process that has exited but is not reaped yet: its /proc entry still holds its CPU time,
        # children it reaped included (the runner's CPU monitor reads it there: collectors.cpu)
        self.on_exit: Callable[[int], None] = lambda pid: None
        self.warm: WarmPool | None = None  # the run's warm Python processes (net.warm), for :meth:`spawn`
        self._waits: list[Callable[[], object]] = []  # what ready() waits for
        self.subflows: SubflowSampler | None = None  # its sockets' sampler (sample_sockets), if it has one

    @property
    def raw_dir(self) -> Path:
        path = self.run_dir / RAW_DIR
        path.mkdir(exist_ok=True)
        return path

    @classmethod  # noqa: B027  (optional hook)
    def prepare_host(cls, cfg: AppConfig) -> None:
        """Work to do on the host before a VM boots: the guest sees the project read-only (e.g. media)."""

    @classmethod
    def warm_modules(cls, cfg: AppConfig) -> tuple[str, ...]:
        """The modules this app will run as ``python -m`` in a run (one entry per process): the runner starts
        them warm as the run begins (net.warm)."""
        return ()

    def prepare(self) -> None:  # noqa: B027  (optional hook: clients-only apps have nothing to prepare)
        """Start servers; what to wait for before they accept connections goes to :meth:`when_ready`."""

    def ready(self) -> None:
        """Wait (in order) for what :meth:`prepare` left to :meth:`when_ready`; raises if it does not come."""
        waits, self._waits = self._waits, []
        for wait in waits:
            wait()

    def when_ready(self, wait: Callable[[], object]) -> None:
        """Have :meth:`ready` call ``wait`` (a check that returns once something prepared is up, or raises)."""
        self._waits.append(wait)

    @abc.abstractmethod
    def start(self) -> None:
        """Start the traffic (called at ``cfg.start_s`` on the run clock)."""

    def done(self) -> bool:
        """Whether the app's traffic is over before the run's duration (``experiment.end_when_done``): an app
        with a finite job (a player that played to the end, an object download) says so; the others run for
        their planned time, so a run with one of them lasts its duration."""
        return False

    @abc.abstractmethod
    def finish(self, deadline: float) -> None:
        """Wait (until ``deadline`` on the run clock) for the traffic to end; write CSVs."""

    def outputs(self) -> dict[str, tuple[Sequence[str], list[dict[str, Any]]]]:
        """CSV files of this app: name -> (fields, rows); apps of one kind share files."""
        return {}

    def stop(self) -> None:
        self.stop_sockets()
        for proc in reversed(self.procs):
            stop(proc)
        for fh in self._files:
            fh.close()

    # ------------------------------------------------------------ helpers

    def sample_sockets(self, *, client: str, server: str, port: int) -> None:
        """From now until :meth:`stop_sockets`, the TCP (and MPTCP subflow) sockets between ``client`` and
        ``server``'s ``port``, read at both ends (collectors.subflows: bytes per path at the client, the sender's
        tcp_info at the server) into ``subflows.csv`` (:meth:`socket_outputs`)."""
        spec = self.net.spec
        link_of = {str(link.address(node, spec.base).ip): link.name
                   for node in (client, server) for link in spec.links_of(node)}
        self.subflows = SubflowSampler(app=self.cfg.name, ns=self.net.ns(client), port=port, link_of=link_of,
                                       clock=self.clock, interval_s=SOCKET_INTERVAL_S[self.in_vm],
                                       server_ns=self.net.ns(server))
        self.subflows.start()

    def stop_sockets(self) -> None:
        """The sampler's last sample and its end (idempotent)."""
        if self.subflows is not None:
            self.subflows.stop()

    def socket_outputs(self) -> dict[str, tuple[Sequence[str], list[dict[str, Any]]]]:
        """``subflows.csv``'s rows of this app (none when it sampled no sockets)."""
        return {} if self.subflows is None else {SUBFLOWS: (SUBFLOW_FIELDS, self.subflows.rows)}

    def spawn(self, node: str, argv: Sequence[str], *, log: str, cwd: Path | None = None,
              stderr_log: str | None = None, timer_slack_ns: int | None = None) -> subprocess.Popen[bytes]:
        out = (self.raw_dir / log).open("wb")
        err = (self.raw_dir / stderr_log).open("wb") if stderr_log else subprocess.STDOUT
        self._files.append(out)
        if not isinstance(err, int):
            self._files.append(err)
        warm = self.warm.take(self.net.ns(node), argv, stdout=self.raw_dir / log,
                              stderr=self.raw_dir / stderr_log if stderr_log else None, cwd=cwd,
                              timer_slack_ns=timer_slack_ns) if self.warm else None
        proc = warm or popen_in_ns(self.net.ns(node), argv, stdout=out, stderr=err, cwd=cwd,
                                   timer_slack_ns=timer_slack_ns)
        self.procs.append(proc)
        return proc

    def start_caddy(self, *, node: str, root: Path, transport: str, ca: Path, port: int = caddy.PORT,
                    qlog_dir: Path | None = None) -> None:
        """Caddy serving ``root`` on ``node``'s ``port`` (:func:`nest_experiments.dash.origin.caddy.config`), ready (TCP,
        and UDP where it serves h3) when this returns.

        Its configuration, certificates, home and storage lie in a private temporary folder of the run; its
        access log (JSON) in ``raw/``; ``ca`` receives the CA of its certificate. ``qlog_dir``: quic-go's qlog of
        each HTTP/3 connection there (``QLOGDIR``, read by Caddy's quic-go: ``<odcid>_server.sqlog``).
        """
        name = self.cfg.name
        exe = caddy.binary()
        self.versions[f"apps.{name}.http_server"] = f"caddy {tool_version([exe, 'version'])}"
        home, addr = self.net.state.temp_dir("caddy"), self.net.addr(node)
        files = certs.write_certs(home, [addr])
        write_bytes_atomic(ca, files.ca.read_bytes())
        conf = caddy.config(root=root, addr=addr, port=port, transport=transport,
                            access_log=self.raw_dir / app_file(name, CADDY_ACCESS_LOG), storage=home / "storage",
                            chain=files.chain, key=files.key)  # fmt: skip
        write_json(home / "caddy.json", conf)
        # GOMAXPROCS=1: one OS thread runs Go code (idle scheduler threads spinning for work cost the TCG guest
        # ~40% of a core in the httperf app); XDG_*: Caddy's autosave and data stay in the run's temp folder
        env = [f"HOME={home}", f"XDG_CONFIG_HOME={home}", f"XDG_DATA_HOME={home}", "GOMAXPROCS=1",
               *([f"QLOGDIR={qlog_dir}"] if qlog_dir is not None else [])]
        proc = self.spawn(node, ["env", *env, exe, "run", "--config", str(home / "caddy.json")],
                          log=app_file(name, SERVER, OUT), stderr_log=app_file(name, SERVER, ERR))
        self.wait_listening(node, port, proc=proc)
        if transport in ("h3", "race"):
            self.wait_listening(node, port, proto="udp", proc=proc)

    def wait_listening(self, node: str, port: int, *, proto: str = "tcp", timeout_s: float = 10.0,
                       proc: subprocess.Popen[bytes] | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if is_listening(self.net.ns(node), port, proto=proto):
                return
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RunError(f"apps.{self.cfg.name}: server on {node} port {port}/{proto} did not start "
                       f"(see {self.raw_dir})")

    @staticmethod
    def exited(proc: subprocess.Popen[bytes] | None) -> bool:
        """Whether ``proc`` was started and has exited (a finite app's :meth:`done`)."""
        return proc is not None and proc.poll() is not None

    def wait_proc(self, proc: subprocess.Popen[bytes], deadline: float, what: str) -> int:
        """Wait for ``proc`` to exit; let :attr:`on_exit` read it before it is reaped; return its exit code."""
        if not wait_exited(proc, timeout_s=max(0.1, deadline - self.clock())):
            stop(proc)
            raise RunError(f"apps.{self.cfg.name}: {what} did not finish in time")
        self.on_exit(proc.pid)
        return proc.wait()


def tool_version(argv: list[str]) -> str:
    """The first line a tool prints of its version ("?" when it cannot say); asked once per process (a sweep's
    runner asks for every run, and under TCG a process costs ~0.3 s)."""
    return _tool_version(tuple(argv))


@functools.cache
def _tool_version(argv: tuple[str, ...]) -> str:
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else "?"




def read_rows(path: Path, *, app: str, missing_ok: bool = False) -> list[dict[str, Any]]:
    """An app's CSV as dicts, each with the app's name; a missing file: [] if ``missing_ok``, else the OSError."""
    if missing_ok and not path.exists():
        return []
    with path.open(newline="") as fh:
        return [{**row, "app": app} for row in csv.DictReader(fh)]


def last_line(path: Path) -> str:
    """The last non-blank line of a log (an app's stderr: what to say when it failed), "" if none or unreadable."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""
