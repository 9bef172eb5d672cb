"""httperf web requests against a file server: ``httperf.csv`` (one row per app).

The server (``server``: nginx, one process with no master, or ``caddy
file-server``) on ``dst`` serves one generated file of ``size`` bytes over
plain HTTP/1.1; its config, logs, pid and temporary folders point into the
run folder, since the VM guest's root is read-only. The file itself lies in
a private temporary folder (:meth:`RunState.temp_dir`), not in the run
folder: under the VM runtime that is a 9p share, and opening and reading the
file there cost ~6 ms of guest CPU per request (nginx took ~10 s of CPU in a
65 s run at 15 requests/s). The client opens
``rate`` connections per second, one GET each, ``rate x duration`` in all
(``--num-conns``). Debian's httperf busy-polls a core: it runs with
:mod:`nest_experiments.apps.selectwait` preloaded, which makes it sleep
between events (like httperf's own ``DONT_POLL`` build, with a longer wait
and exact time stamps), and in a cgroup capped at ``cpu_limit`` of one CPU
(:mod:`nest_experiments.apps.cpucap`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nest_experiments.apps.base import App, tool_version
from nest_experiments.apps.cpucap import CpuCap
from nest_experiments.apps.selectwait import WAIT_US, build_cached, preload_library
from nest_experiments.config import HttperfApp
from nest_experiments.net.procs import require_tool, stop
from nest_experiments.parsers import httperf as parse
from nest_experiments.rundir import CLIENT, ERR, HTTPERF, LOG, SERVER, WEB_DIR, app_file

FILE_NAME = "object.bin"

# one process (no master, no daemon), no access log; every path nginx would write points into the run folder
NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
user root;
pid {home}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    keepalive_timeout 5s;
    client_body_temp_path {home}/client_body;
    proxy_temp_path {home}/proxy;
    fastcgi_temp_path {home}/fastcgi;
    uwsgi_temp_path {home}/uwsgi;
    scgi_temp_path {home}/scgi;
    server {{
        listen {addr}:{port};
        root {root};
    }}
}}
"""
FIELDS = (*parse.FIELDS, "size_bytes", "cpu_limit_pct", "cpu_throttled_ratio", "select_wait_us")


def file_bytes(size: int) -> bytes:
    """Deterministic, incompressible-looking content (no server compresses it anyway)."""
    block = bytes((i * 167 + 13) % 256 for i in range(4096))
    return (block * (size // len(block) + 1))[:size]


class Httperf(App):
    cfg: HttperfApp

    @property
    def work_dir(self) -> Path:
        return self.raw_dir / app_file(self.cfg.name, WEB_DIR)

    @property
    def length_s(self) -> float:
        c = self.cfg
        return c.duration_s if c.duration_s is not None else self.run_duration_s - c.start_s

    @property
    def connections(self) -> int:
        return max(1, round(self.cfg.rate * self.length_s))

    @classmethod
    def prepare_host(cls, cfg: Any) -> None:
        """The select-wait library into the project's cache, before the VM boots (apps.selectwait)."""
        build_cached()

    def prepare(self) -> None:
        c = self.cfg
        require_tool("httperf", "httperf")
        require_tool(c.server, c.server)  # the Debian/Ubuntu package has the name of the server
        self.versions["httperf"] = tool_version(["httperf", "--version"])
        self.preload = preload_library(self.net.state)
        root, home = self.net.state.temp_dir("web"), self.work_dir / c.server
        home.mkdir(parents=True, exist_ok=True)
        (root / FILE_NAME).write_bytes(file_bytes(c.size))
        addr = self.net.addr(c.dst)
        if c.server == "nginx":
            self.versions["nginx"] = tool_version(["nginx", "-v"])
            conf = home / "nginx.conf"
            conf.write_text(NGINX_CONF.format(home=home, addr=addr, port=c.port, root=root))
            argv = ["nginx", "-p", str(home), "-e", "stderr", "-c", str(conf)]
        else:
            self.versions["caddy"] = tool_version(["caddy", "version"])
            # GOMAXPROCS=1: one OS thread runs Go code; idle scheduler threads spinning for work cost ~40% of a
            # core in the TCG guest at 15 requests/s
            env = [f"HOME={home}", f"XDG_CONFIG_HOME={home}", f"XDG_DATA_HOME={home}", "GOMAXPROCS=1"]
            argv = ["env", *env, "caddy", "file-server", "--listen", f"{addr}:{c.port}", "--root", str(root)]
        self.server = self.spawn(c.dst, argv, log=app_file(c.name, SERVER, LOG))
        self.when_ready(functools.partial(self.wait_listening, c.dst, c.port, proc=self.server))
        self.cap = CpuCap(c.name, c.cpu_limit, state=self.net.state)
        warning = self.cap.create()
        if warning:
            self.warnings.append(f"apps.{c.name}: {warning}")

    def start(self) -> None:
        c = self.cfg
        argv = ["env", f"LD_PRELOAD={self.preload}", "httperf", "--server", self.net.addr(c.dst), "--port", str(c.port),
                "--uri", f"/{FILE_NAME}", "--rate", f"{c.rate:g}", "--num-conns", str(self.connections), "--num-calls", "1",
                "--timeout", f"{c.timeout_s:g}"]
        self.t_start = self.clock()
        self.client = self.spawn(c.src, argv, log=app_file(c.name, CLIENT, LOG), stderr_log=app_file(c.name, CLIENT, ERR))
        warning = self.cap.add(self.client.pid)  # ip netns exec and env exec httperf: the same pid
        if warning:
            self.warnings.append(f"apps.{c.name}: {warning}")

    def finish(self, deadline: float) -> None:
        c = self.cfg
        code = self.wait_proc(self.client, deadline + c.timeout_s, "httperf client")
        self.cap.remove()
        stop(self.server)
        text = (self.raw_dir / app_file(c.name, CLIENT, LOG)).read_text()
        row = parse.summary_row(text, what=f"apps.{c.name} (exit {code})", app=c.name, src=c.src, dst=c.dst,
                                rate_target=c.rate)
        row.update(size_bytes=c.size, cpu_limit_pct=round(c.cpu_limit * 100, 3) if self.cap.version else "",
                   cpu_throttled_ratio=self.cap.throttled_ratio(), select_wait_us=WAIT_US)
        self.rows = [row]
        if row["connections"] < self.connections:
            self.warnings.append(f"apps.{c.name}: httperf opened {row['connections']} of {self.connections} connections")
        if row["reply_ratio"] < 0.99:
            self.warnings.append(f"apps.{c.name}: {row['replies']} replies to {row['requests']} requests")

    def outputs(self) -> dict[str, tuple[Sequence[str], list[dict[str, Any]]]]:
        return {HTTPERF: (FIELDS, getattr(self, "rows", []))}

    def stop(self) -> None:
        super().stop()
        if hasattr(self, "cap"):
            self.cap.remove()
