"""Object-download sessions (``kind = "objects"``): an origin serving generated objects, our download client.

``prepare()`` creates the schedule's object files (sparse, in a temp folder of
the run: removed with the run, also after a crash) and starts the origin on
the server node: Caddy (``http_server = "caddy"``, the default: its HTTP/3
is quic-go, the ABR-over-QUIC paper's stack; access log ``raw/NAME.access.json``)
or our server (``"nest"``: its HTTP/3 is aioquic; ``raw/NAME.access.csv``, on
the server's own clock). ``start()`` runs
``python -m nest_experiments.apps.objects_client fetch`` on the client node with the
run's t = 0, so that its times are on the run clock; ``finish()`` reads its
CSV into ``objects.csv`` (:data:`nest_experiments.apps.objects_client.FIELDS` +
``app``). The client sends no request after the run's duration; objects it
did not get to are a warning. Over tcp and h2 the client's connections are
read at both ends once a second (``subflows.csv``, as the DASH app's: the
sender's cwnd, RTT, pacing and delivery rate, retransmits, ECN), with the
app's name in its ``app`` column.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nest_experiments.apps import objects_client as objects
from nest_experiments.apps.base import SERVER_MODULE, App, last_line, read_rows
from nest_experiments.config import AppConfig, ObjectsApp
from nest_experiments.dash.origin import caddy
from nest_experiments.errors import RunError
from nest_experiments.rundir import ACCESS_LOG, CA, CLIENT, ERR, OBJECTS, OBJECTS_RAW, OUT, SERVER, app_file

READY_TIMEOUT_S = 20.0
CADDY_PORT = caddy.PORT
CLIENT_MODULE = "nest_experiments.apps.objects_client"  # its ``fetch`` command


def design(c: ObjectsApp) -> objects.Design:
    return objects.Design(mode=c.mode, requests=c.requests, size_min=c.size_min, size_max=c.size_max,
                          pause_min_s=c.pause_min_s, pause_max_s=c.pause_max_s, streams=c.streams,
                          sessions=c.sessions, seed=c.seed)


def design_argv(c: ObjectsApp) -> list[str]:
    """The client's design arguments (exact: bytes and microseconds)."""
    return ["--mode", c.mode, "--requests", str(c.requests), "--sizes", f"{c.size_min}b:{c.size_max}b",
            "--pause", f"{round(c.pause_min_s * 1e6)}us:{round(c.pause_max_s * 1e6)}us", "--streams", str(c.streams),
            "--sessions", str(c.sessions), "--seed", str(c.seed)]


class Objects(App):
    cfg: ObjectsApp

    @classmethod
    def warm_modules(cls, cfg: AppConfig) -> tuple[str, ...]:
        # the client starts inside the traffic phase: warm, its imports are not part of the session
        return (CLIENT_MODULE,) if cfg.http_server == "caddy" else (SERVER_MODULE, CLIENT_MODULE)  # type: ignore[attr-defined]

    def prepare(self) -> None:
        c = self.cfg
        self.root = self.net.state.temp_dir("objects")
        objects.make_files(self.root, objects.sizes_needed(design(c)))
        self.ca = self.raw_dir / app_file(c.name, CA)
        if c.http_server == "caddy":
            self._start_caddy()
        else:
            self._start_server()

    def _start_server(self) -> None:
        c = self.cfg
        argv = [sys.executable, "-m", SERVER_MODULE, "--root", str(self.root),
                "--bind", self.net.addr(c.server), f"--port-{c.transport}", "0", "--ca-out", str(self.ca),
                "--access-log", str(self.raw_dir / app_file(c.name, ACCESS_LOG)),
                "--cert-dir", str(self.net.state.temp_dir("certs"))]  # a run's temp dir: a dead run's is swept
        self.server = self.spawn(c.server, argv, log=app_file(c.name, SERVER, OUT), stderr_log=app_file(c.name, SERVER, ERR))
        self.port = int(self._wait_ready()["ports"][c.transport])
        quic = f" (h3: aioquic {_version('aioquic')})" if c.transport == "h3" else ""
        self.versions[f"apps.{c.name}.http_server"] = f"nest_experiments{quic}"

    def _wait_ready(self) -> dict[str, Any]:
        out = self.raw_dir / app_file(self.cfg.name, SERVER, OUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.server.poll() is None:
            for line in out.read_text().splitlines():
                doc = _json(line)
                if doc.get("ready"):
                    return doc
            time.sleep(0.05)
        raise RunError(f"apps.{self.cfg.name}: server on {self.cfg.server} did not start (see {self.raw_dir})")

    def _start_caddy(self) -> None:
        """Caddy serving the objects."""
        self.start_caddy(node=self.cfg.server, root=self.root, transport=self.cfg.transport, ca=self.ca)
        self.port = CADDY_PORT

    @property
    def csv_path(self) -> Path:
        return self.raw_dir / app_file(self.cfg.name, OBJECTS_RAW)

    def start(self) -> None:
        c = self.cfg
        self.t_start = self.clock()
        t0 = time.monotonic() - self.t_start
        argv = [sys.executable, "-m", CLIENT_MODULE, "fetch", "--kind", c.transport,
                "--host", self.net.addr(c.server), "--port", str(self.port), *design_argv(c), "--t0", repr(t0),
                "--max-duration", f"{max(1.0, self.run_duration_s - c.start_s):g}", "--out", str(self.csv_path),
                "--h3-client", c.h3_client]
        if c.transport != "tcp":
            argv += ["--ca", str(self.ca)]
        self.versions[f"apps.{c.name}.client"] = _client_version(c)
        self.client = self.spawn(c.client, argv, log=app_file(c.name, CLIENT, OUT), stderr_log=app_file(c.name, CLIENT, ERR))
        if c.transport != "h3":  # the TCP connections' state at both ends (QUIC's is not a kernel socket)
            self.sample_sockets(client=c.client, server=c.server, port=self.port)

    def done(self) -> bool:
        return self.exited(getattr(self, "client", None))

    def finish(self, deadline: float) -> None:
        c = self.cfg
        try:
            code = self.wait_proc(self.client, deadline, "object-download client")
        finally:
            self.stop_sockets()
        self.rows = read_rows(self.csv_path, app=c.name, missing_ok=True)
        planned = len(objects.schedule(design(c)))
        if code != 0:
            self.failure = (f"apps.{c.name}: object-download client failed ({len(self.rows)} of {planned} objects): "
                            f"{last_line(self.raw_dir / app_file(c.name, CLIENT, ERR)) or f'exit {code}'}")
        elif len(self.rows) < planned:
            self.warnings.append(f"apps.{c.name}: {len(self.rows)} of {planned} objects downloaded "
                                 "(the run's duration ended first)")

    def outputs(self) -> dict[str, tuple[Sequence[str], list[dict[str, Any]]]]:
        return {OBJECTS: ((*objects.FIELDS, "app"), getattr(self, "rows", [])), **self.socket_outputs()}


def _client_version(c: ObjectsApp) -> str:
    if c.transport != "h3":
        return f"nest_experiments ({c.transport})"
    if c.h3_client == "quic-go":
        return "nest_experiments (h3: quic-go, nest-h3get)"
    return f"nest_experiments (h3: {c.h3_client} {_version(c.h3_client)})"


def _version(package: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _json(line: str) -> dict[str, Any]:
    try:
        doc = json.loads(line)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
