"""DASH sessions: our server and headless player (``segments.csv``, ``abr_decisions.csv``, ``qoe.json``).

``prepare()`` generates (or reuses) the media, configures MPTCP when the
transport is ``mptcp``, and starts the origin on the server node: our
:mod:`nest_experiments.dash.origin.server` (``http_server = "nest"``) or Caddy
(``"caddy"``: quic-go for h3, configured by :mod:`nest_experiments.dash.origin.caddy`,
its JSON access log read by :mod:`nest_experiments.parsers.caddy`) or webfsd (``"webfs"``: Debian's webfs,
plain HTTP/1.1 over TCP, the ABR letter's server; its log has second-resolution times and per-connection byte
counts, so ``access.csv`` holds no rows for it: ``raw/<app>.webfs.log`` keeps what it wrote);
``start()`` runs :mod:`nest_experiments.dash.players.client` on the client
node; ``finish()`` waits for the player and reads what it wrote. Raw files
(server access log and stdout/stderr, the client's own CSVs) stay in
``raw/``. The server starts in ``prepare()``, before the run's t = 0 is
fixed, so its access log is written again as ``access.csv`` with its times
moved onto the run clock. Over TCP transports (``tcp``, ``mptcp``, ``h2``) the
client's sockets towards the server are sampled once a second into
``subflows.csv``: with MPTCP, one row per subflow and so per path. With
MPTCP, ``mptcp.json`` holds the kernel's MPTCP counters of the client and
the server at the end of the session (``/proc/net/netstat``, ``MPTcpExt``):
how many ADD_ADDRs and MP_JOINs each side sent and received. The manifest's
``versions`` name the origin's software (``apps.NAME.http_server``) and the
player's HTTP implementation (``apps.NAME.client``: the QUIC stack over h3,
``h3_client``); ``qoe.json`` repeats both.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import shutil
import subprocess
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nest_experiments.apps.base import SERVER_MODULE, App, last_line, read_rows
from nest_experiments.config import AppConfig, DashApp
from nest_experiments.dash import players
from nest_experiments.dash.content import encode, media
from nest_experiments.dash.http import quicgo, recovery
from nest_experiments.dash.origin import caddy
from nest_experiments.dash.players.playerargs import PlayerArgs
from nest_experiments.errors import MissingToolError, RunError
from nest_experiments.net import mptcp, sockets
from nest_experiments.parsers import caddy as caddy_log
from nest_experiments.parsers import qlog
from nest_experiments.rundir import (
    ACCESS,
    ACCESS_LOG,
    CA,
    CADDY_ACCESS_LOG,
    CLIENT,
    DECISIONS,
    ERR,
    GO_FILE,
    MPTCP,
    NETLOG,
    OUT,
    PLAYER_DIR,
    QOE,
    QUIC,
    QUIC_LOG,
    QUIC_QLOG,
    RACING,
    SEGMENTS,
    SERVER,
    app_file,
    write_json,
)
from nest_experiments.rundir.rows import ACCESS_LOG_FIELDS as ACCESS_FIELDS
from nest_experiments.rundir.rows import DECISION_FIELDS, QUIC_FIELDS, RACING_FIELDS, SEGMENT_FIELDS

READY_TIMEOUT_S = {False: 20.0, True: 120.0}  # by App.in_vm: on the host or in the VM runtime's guest
BROWSER_READY_FACTOR = 4  # Chromium started and the namespace's addresses settled: 4 x READY_TIMEOUT_S
ACCESS_TIMES = ("t_arrival", "t_first_byte_sent", "t_last_byte_sent")
CADDY_PORT = caddy.PORT  # TCP and, for h3, UDP
OUR_PORTS = (20000, 29999)  # our server's port: fixed per app name (the player is started before the server listens)


def server_port(app: str) -> int:
    """Our DASH server's port for app ``app``: fixed by its name, so that two DASH apps on one node differ."""
    low, high = OUR_PORTS
    return low + zlib.crc32(app.encode()) % (high - low + 1)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


class Dash(App):
    cfg: DashApp

    @classmethod
    def prepare_host(cls, cfg: AppConfig) -> None:
        mpd = cls.media(cfg)  # type: ignore[arg-type]
        if players.KINDS[cfg.player].browser or cfg.page == "dashjs":  # type: ignore[attr-defined]
            players.install_dashjs_page(mpd.parent)

    @classmethod
    def warm_modules(cls, cfg: AppConfig) -> tuple[str, ...]:
        # our server and our player; the other players start a browser or GPAC, whose start is not Python's,
        # as `ip netns exec` starts them (its own /sys and mount namespace)
        c: DashApp = cfg  # type: ignore[assignment]
        server = (SERVER_MODULE,) if c.http_server == "nest" else ()
        player = players.KINDS[c.player]
        return (*server, *((player.module,) if player.launch == "ours" else ()))

    @staticmethod
    def media(c: DashApp) -> Path:
        """The content's MPD, generated or encoded into the cache unless it is there (the VM's guest only reads it)."""
        ladder = media.load_ladder(c.ladder)
        if c.media == "encoded":
            return encode.encode(ladder, duration_s=c.clip_s, codec=c.codec, source=c.source)
        return media.generate(ladder, duration_s=c.clip_s, vbr=c.vbr)

    def prepare(self) -> None:
        c = self.cfg
        ladder = media.load_ladder(c.ladder)
        self.mpd = self.media(c)
        self.media_s = c.clip_s if c.clip_s is not None else ladder.duration_s
        self.out_dir = self.raw_dir / app_file(c.name, PLAYER_DIR)
        self.ca = self.raw_dir / app_file(c.name, CA)
        if c.transport == "mptcp":
            self._setup_mptcp()
        if c.http_server in ("caddy", "webfs"):
            self._start_caddy() if c.http_server == "caddy" else self._start_webfs()
            self._spawn_client()
            return
        self._spawn_server()
        if players.KINDS[c.player].reads_cert_at_start:  # Chromium and GPAC read the server's certificate at start
            self._await_server()
            self._spawn_client()
            return
        # our player starts beside our server (each a Python process whose imports take seconds under TCG, unless
        # warm): it reads the certificate and connects only after the run's go, and the server's port is fixed
        self._spawn_client()
        self.when_ready(self._await_server)

    def _spawn_server(self) -> None:
        """Our server (:mod:`nest_experiments.dash.origin.server`) on a fixed port of its namespace (:func:`server_port`);
        :meth:`_await_server` waits until it says it listens."""
        c = self.cfg
        # MPTCP joins may target any of the server's addresses: listen on all of them
        bind = "0.0.0.0" if c.transport == "mptcp" else self.net.addr(c.server)
        t0 = self.server_t0 = time.monotonic() - self.clock()
        # race: TLS over TCP (h2) and h3 on one known port, as Caddy (a firewall rule can name it); alt-svc says h3
        self.port = CADDY_PORT if c.transport == "race" else server_port(c.name)
        ports = ["--port-h2", str(CADDY_PORT), "--port-h3", str(CADDY_PORT)] if c.transport == "race" else \
            [f"--port-{c.transport}", str(self.port)]
        argv = [sys.executable, "-m", SERVER_MODULE, "--root", str(self.mpd.parent),
                "--bind", bind, *ports, "--access-log", str(self.raw_dir / app_file(c.name, ACCESS_LOG)),
                "--t0", repr(t0), "--ca-out", str(self.ca), "--cert-dir", str(self.net.state.temp_dir("certs"))]
        if c.transport in ("h3", "race"):  # the sender's recovery of each QUIC connection (dash.http.recovery)
            argv += ["--quic-log", str(self.raw_dir / app_file(c.name, SERVER, QUIC_LOG))]
        self.server = self.spawn(c.server, argv, log=app_file(c.name, SERVER, OUT), stderr_log=app_file(c.name, SERVER, ERR))

    def _await_server(self) -> None:
        c = self.cfg
        ready = self._wait_ready(self.server, SERVER)["ports"]
        port = int(ready["h2" if c.transport == "race" else c.transport])
        if port != self.port:  # a bug: the server listens where the player will not look
            raise RunError(f"apps.{c.name}: the DASH server listens on port {port}, not {self.port}")
        quic = f" (h3: aioquic {_version('aioquic')})" if c.transport in ("h3", "race") else ""
        self.versions[f"apps.{c.name}.http_server"] = f"nest_experiments{quic}"

    def _start_caddy(self) -> None:
        c = self.cfg
        # quic-go's qlog of each h3 connection (QLOGDIR: every event, packets too; its recovery events become
        # quic.csv rows). Not in the VM runtime, where encoding each packet's event costs the emulated CPU
        self.caddy_qlog = self.net.state.temp_dir("qlog") if c.transport in ("h3", "race") and not self.in_vm \
            else None
        self.start_caddy(node=c.server, root=self.mpd.parent.resolve(), transport=c.transport, ca=self.ca,
                         qlog_dir=self.caddy_qlog)
        self.port = CADDY_PORT

    def _start_webfs(self) -> None:
        """webfsd serving the media on the server's fixed port (:func:`server_port`), in the foreground, ready when
        this returns; its access log in ``raw/``."""
        c = self.cfg
        exe = shutil.which(WEBFSD)
        if exe is None:
            raise MissingToolError(f"apps.{c.name}.http_server 'webfs': {WEBFSD} not found; apt-get install webfs "
                                   "(./setup.sh installs it)")
        self.port = server_port(c.name)
        addr = self.net.addr(c.server)
        argv = [exe, "-F", "-4" if ":" not in addr else "-6", "-i", addr, "-p", str(self.port),
                "-r", str(self.mpd.parent.resolve()), "-j", "-c", str(WEBFS_CONNECTIONS),
                "-L", str(self.raw_dir / app_file(c.name, WEBFS_LOG))]
        self.versions[f"apps.{c.name}.http_server"] = f"webfsd {webfs_version()}"
        proc = self.spawn(c.server, argv, log=app_file(c.name, SERVER, OUT), stderr_log=app_file(c.name, SERVER, ERR))
        self.wait_listening(c.server, self.port, proc=proc)

    def _setup_mptcp(self) -> None:
        """Limits on both ends; the client opens subflows from its extra addresses, the server announces its
        extra addresses (so that a subflow can also come back on the other path): planned, applied, read back."""
        c = self.cfg
        flags = ("subflow", "fullmesh") if c.mptcp_endpoints == "fullmesh" else ("subflow",)
        for node, node_flags in ((c.client, flags), (c.server, ("signal",))):
            if c.mptcp_add_addr_timeout_s is not None:
                self.net.sysctl(node, "net.mptcp.add_addr_timeout", str(c.mptcp_add_addr_timeout_s))
            plan = mptcp.plan_node(self.net.spec, node, ns=self.net.ns(node), subflows=c.mptcp_subflows,
                                   flags=node_flags)
            mptcp.apply(plan, what=f"apps.{c.name}")

    def _wait_ready(self, proc: subprocess.Popen[bytes], who: str, timeout_s: float | None = None) -> dict[str, Any]:
        """The first ``{"ready": true, ...}`` line a process of ours prints to its ``.out`` log."""
        c = self.cfg
        out = self.raw_dir / app_file(c.name, who, OUT)
        deadline = time.monotonic() + (READY_TIMEOUT_S[self.in_vm] if timeout_s is None else timeout_s)
        while time.monotonic() < deadline:
            for line in out.read_text().splitlines():
                try:
                    ready = json.loads(line)
                except ValueError:
                    continue
                if isinstance(ready, dict) and ready.get("ready"):
                    return ready
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        err = last_line(self.raw_dir / app_file(c.name, who, ERR))
        node = c.server if who == SERVER else c.client
        raise RunError(f"apps.{c.name}: DASH {who} on {node} did not start{': ' + err if err else ''} "
                       f"(see {self.raw_dir})")

    def _spawn_client(self) -> None:
        """Start the player process now, before the run's clock: it imports, says it is ready and waits.

        Its imports (aioquic, cryptography, ...) take seconds, and under the TCG
        VM with the CPU busy with the other apps took over 100 s: they must not
        eat into the session. ``start()`` releases it through the go file.
        """
        c = self.cfg
        if c.transport == "h3" and c.h3_client == "quic-go":
            quicgo.binary()  # missing: say how to build it, before the player starts
        self.go_file = self.raw_dir / app_file(c.name, GO_FILE)
        launch = players.KINDS[c.player].launch
        if launch == "browser":
            self._spawn_browser()
            return
        if launch == "gpac":
            self._spawn_gpac()
            return
        argv = [sys.executable, "-m", players.KINDS[c.player].module, *self._player_args().to_argv(),
                "--mpd", f"/{self.mpd.name}", "--abr-audio", c.abr_audio, "--h3-client", c.h3_client,
                "--abandon", c.abandon, "--initial-bitrate", c.initial_bitrate,
                "--schedule", c.schedule, "--fast-switch", c.fast_switch, "--http-cache", c.http_cache,
                "--idle-timeout", f"{self._idle_timeout_s():g}"]
        if c.page == "dashjs":  # the page and dash.all.min.js first, from the origin, as a browser loads them
            argv += [a for path in (players.install_dashjs_page(self.mpd.parent), f"/{players.DASHJS_FILE.name}")
                     for a in ("--prelude", path)]
        if c.transport == "race":
            argv += ["--racing", c.racing, "--racing-params", json.dumps(dict(c.racing_params))]
        if "fixed" in (c.abr, c.abr_audio):
            argv += ["--level", str(c.level)]
        if c.transport == "h3" and c.h3_client in ("quic-go", "aioquic"):  # its connection's recovery (qh3: none)
            log = QUIC_QLOG if c.h3_client == "quic-go" else QUIC_LOG
            argv += ["--quic-log", str(self.raw_dir / app_file(c.name, CLIENT, log))]
        self.client = self.spawn(c.client, argv, log=app_file(c.name, CLIENT, OUT), stderr_log=app_file(c.name, CLIENT, ERR))
        self.when_ready(functools.partial(self._wait_ready, self.client, CLIENT))

    def _idle_timeout_s(self) -> float:
        """How long our player waits on a response without a byte: the file's ``idle_timeout``, or (``"none"``)
        longer than the session can last, so that only the session's end stops the wait."""
        c = self.cfg
        return c.idle_timeout_s if c.idle_timeout_s is not None else self.run_duration_s + 1.0

    def _player_args(self) -> PlayerArgs:
        """The session every player is given (the certificate over TLS transports: h2, h3, race)."""
        c = self.cfg
        return PlayerArgs(server=self.net.addr(c.server), port=self.port, transport=c.transport, out=self.out_dir,
                          abr=c.abr, max_buffer_s=c.max_buffer_s, threshold_s=c.threshold_s, go_file=self.go_file,
                          max_duration_s=max(1.0, self.run_duration_s - c.start_s),
                          ca=self.ca if c.transport in ("h2", "h3", "race") else None)

    def _spawn_browser(self) -> None:
        """dash.js in headless Chromium (:mod:`nest_experiments.dash.players.browser`) or Firefox
        (:mod:`nest_experiments.dash.players.firefoxplayer`), its profile in a temp folder of the run."""
        c = self.cfg
        page = players.install_dashjs_page(self.mpd.parent)
        sockets.wait_addresses_settled(self.net.ns(c.client))  # a browser started before DAD ends sees it as a change
        argv = [sys.executable, "-m", players.KINDS[c.player].module, *self._player_args().to_argv(),
                "--page", page, "--mpd-file", str(self.mpd),
                "--profile", str(self.net.state.temp_dir(c.player) / "profile")]
        if c.player == "dashjs":
            argv += ["--netlog", str(self.raw_dir / app_file(c.name, NETLOG))]
        self.client = self.spawn(c.client, argv, log=app_file(c.name, CLIENT, OUT),
                                 stderr_log=app_file(c.name, CLIENT, ERR))
        # Chromium is up before ready
        self._wait_ready(self.client, CLIENT, timeout_s=BROWSER_READY_FACTOR * READY_TIMEOUT_S[self.in_vm])

    def _spawn_gpac(self) -> None:
        """GPAC's DASH client (:mod:`nest_experiments.dash.players.gpacplayer`), its log in the client's folder."""
        c = self.cfg
        argv = [sys.executable, "-m", players.KINDS[c.player].module, *self._player_args().to_argv(),
                "--mpd-file", str(self.mpd)]
        self.client = self.spawn(c.client, argv, log=app_file(c.name, CLIENT, OUT), stderr_log=app_file(c.name, CLIENT, ERR))
        self._wait_ready(self.client, CLIENT)

    def start(self) -> None:
        c = self.cfg
        self.t_start = self.clock()
        write_json(self.go_file, {"t0": time.monotonic() - self.t_start})
        if c.transport != "h3":
            self.sample_sockets(client=c.client, server=c.server, port=self.port)

    def done(self) -> bool:
        return self.exited(getattr(self, "client", None))

    def finish(self, deadline: float) -> None:
        c = self.cfg
        self.segments: list[dict[str, Any]] = []
        self.decisions: list[dict[str, Any]] = []
        self.access: list[dict[str, Any]] = []
        try:
            code = self.wait_proc(self.client, deadline, "DASH client")
        except RunError as exc:  # stopped with SIGTERM at the deadline: it writes what it played so far
            self.warnings.append(str(exc))
            code = 0 if (self.out_dir / QOE).exists() else 1
        finally:
            self.stop_sockets()
        if c.transport == "mptcp":
            self._write_mptcp_counters()
        self.access = self._access_rows()
        if code != 0:
            err = last_line(self.raw_dir / app_file(c.name, CLIENT, ERR)) or f"exit {code}"
            self.failure = f"apps.{c.name}: DASH client failed: {err}"
            return
        self.segments = read_rows(self.out_dir / SEGMENTS, app=c.name)
        self.decisions = read_rows(self.out_dir / DECISIONS, app=c.name)
        if (self.out_dir / RACING).exists():  # the race transport's events (dash.racing_log)
            self.racing = read_rows(self.out_dir / RACING, app=c.name)
        doc = json.loads((self.out_dir / QOE).read_text())
        doc["http_server"] = self.versions.get(f"apps.{c.name}.http_server", "")
        doc.setdefault("player", c.player)
        self.versions[f"apps.{c.name}.client"] = doc.get("client", "")
        ours = players.KINDS[c.player].launch == "ours"
        self.versions[f"apps.{c.name}.player"] = "nest_experiments" if ours else doc.get("client", "")
        _set_app_entry(self.run_dir / QOE, c.name, doc)
        if doc.get("end_reason") != "ended":
            self.warnings.append(f"apps.{c.name}: playback did not reach the end ({doc.get('end_reason')})")

    def _write_mptcp_counters(self) -> None:
        """The MPTCP MIB of both ends into ``mptcp.json`` (the namespaces are this run's: counted from zero)."""
        c = self.cfg
        counters, timeouts = {}, {}
        for node in (c.client, c.server):
            counters[node], timeouts[node] = mptcp.read_counters(self.net.ns(node))
        _set_app_entry(self.run_dir / MPTCP, c.name, {"client": c.client, "server": c.server,
                                                             "add_addr_timeout_s": timeouts, "counters": counters})

    def _access_rows(self) -> list[dict[str, Any]]:
        """The server's access log so far, its times moved from the server's t0 onto the run clock (webfsd's has
        no per-response times: none)."""
        c = self.cfg
        if c.http_server == "webfs":
            return []
        if c.http_server == "caddy":
            log = self.raw_dir / app_file(c.name, CADDY_ACCESS_LOG)
            text = log.read_text(errors="replace") if log.exists() else ""
            wall_t0 = time.time() - self.clock()  # the wall clock at the run's t = 0 (Caddy logs wall time)
            return [{**row, "app": c.name} for row in caddy_log.access_rows(text, wall_t0=wall_t0, what=str(log))]
        log = self.raw_dir / app_file(c.name, ACCESS_LOG)
        path = log if log.exists() else log.with_name(log.name + ".partial")  # renamed when the server exits
        if not path.exists():
            return []
        shift = self.server_t0 - (time.monotonic() - self.clock())
        rows = read_rows(path, app=c.name)
        for row in rows:
            for key in ACCESS_TIMES:
                if row[key] != "":
                    row[key] = f"{float(row[key]) + shift:.6f}"
        return rows

    def outputs(self) -> dict[str, tuple[Sequence[str], list[dict[str, Any]]]]:
        out: dict[str, tuple[Sequence[str], list[dict[str, Any]]]] = {
            SEGMENTS: ((*SEGMENT_FIELDS, "app"), getattr(self, "segments", [])),
            DECISIONS: ((*DECISION_FIELDS, "app"), getattr(self, "decisions", [])),
            ACCESS: ((*ACCESS_FIELDS, "app"), getattr(self, "access", [])),
        }
        if getattr(self, "racing", None) is not None:
            out[RACING] = ((*RACING_FIELDS, "app"), self.racing)
        out.update(self.socket_outputs())
        quic = self._quic_rows()
        if quic is not None:
            out[QUIC] = ((*QUIC_FIELDS, "app"), quic)
        return out

    def _quic_rows(self) -> list[dict[str, Any]] | None:
        """The QUIC recovery rows so far: our server's (written while it runs: read from its partial file) and our
        aioquic player's, and the qlogs of quic-go (Caddy's connections; the quic-go fetcher's, complete once the
        player exited); None when
        the app has no QUIC connection with any of them. A connection still open (its client killed at the
        deadline) gives what its qlog holds so far."""
        name = self.cfg.name
        rows: list[dict[str, Any]] | None = None
        for side in (SERVER, CLIENT):  # our server's rows, and our aioquic player's (side "client")
            log = self.raw_dir / app_file(name, side, QUIC_LOG)
            path = log if log.exists() else recovery.partial(log)
            if path.exists():
                rows = (rows or []) + read_rows(path, app=name)
        caddy_qlog: Path | None = getattr(self, "caddy_qlog", None)
        qlogs = sorted(caddy_qlog.glob("*.sqlog")) if caddy_qlog is not None else []
        fetcher = self.raw_dir / app_file(name, CLIENT, QUIC_QLOG)
        qlogs += [fetcher] if fetcher.exists() else []
        wall_t0 = time.time() - self.clock()  # quic-go's qlog times are wall-clock based
        for file in qlogs:
            rows = (rows or []) + [{**r, "app": name} for r in qlog.recovery_rows(file.read_bytes(), wall_t0=wall_t0,
                                                                                  what=str(file))]
        return rows


WEBFSD = "webfsd"
WEBFS_LOG = "webfs.log"
WEBFS_CONNECTIONS = 64  # webfsd's default is 32; a player holds two (video, audio)


@functools.cache
def webfs_version() -> str:
    """webfsd prints no version of its own: Debian's package version (``?`` where dpkg does not know it)."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "webfs"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.stdout.strip() or "?"


def _set_app_entry(path: Path, app: str, doc: dict[str, Any]) -> None:
    """Write ``doc`` as ``app``'s entry of the run folder's JSON file ``path`` (one entry per DASH app)."""
    merged = json.loads(path.read_text()) if path.exists() else {}
    merged[app] = doc
    write_json(path, merged)
