"""dash.js in headless Firefox ESR: the player process of ``player = "firefox"``.

    python -m nest_experiments.dash.players.firefoxplayer --server ADDR --port N --transport tcp|h2|h3|race --page /PAGE \
        --mpd-file FILE --abr dynamic --max-buffer 10 --threshold 1 --profile DIR --out DIR \
        (--t0 F | --go-file FILE) [--max-duration S] [--ca FILE]

The same page and dash.js as :mod:`.browser` (Chromium), in Debian's
``firefox-esr`` (``--headless``, in the namespace it runs in), driven over
Marionette on the namespace's loopback (``127.0.0.1:`` :data:`MARIONETTE_PORT`:
nothing crosses the emulated link; Firefox has no pipe transport). The page's
events are drained every :data:`.browser.POLL_S` with
``WebDriver:ExecuteScript``; outputs as :mod:`.browser` writes them.

Certificates: the run's CA is added to the profile's NSS database
(``certutil``, package ``libnss3-tools``), so TLS to the origin is valid for
TCP and for QUIC alike. Firefox then still refuses HTTP/3 to a server whose
chain ends in a root it did not ship: its HTTP/3 connection is closed right
after the handshake with ``NS_ERROR_NET_RESET`` (0x804b0014; measured here,
Firefox ESR 153.7) unless ``network.http.http3.disable_when_third_party_roots_found``
is false, which the profile sets. ``race``: HTTP/3 on, nothing forced:
Firefox learns ``alt-svc: h3`` from Caddy's TCP responses and races by its own
rules. ``h3``: ``network.http.http3.alt-svc-mapping-for-testing`` maps the
origin to its h3 port (after a first TCP response, as any Firefox). Firefox
has no NetLog here: ``racing.csv`` holds one ``bound`` row per request to the
origin with the protocol Resource Timing says carried it (``nextHopProtocol``:
h3 -> quic, h2 / http/1.1 -> tcp), and each segment's ``transport`` is that
protocol, as for Chromium.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nest_experiments.dash import players
from nest_experiments.dash.players import browser, dashjs
from nest_experiments.dash.players.playerargs import PlayerArgs
from nest_experiments.errors import MissingToolError, RunError
from nest_experiments.rundir import FIREFOX_LOG, QOE, RACING, write_atomic
from nest_experiments.rundir.rows import RacingRow, write_racing

MARIONETTE_PORT = 2828
CONNECT_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 30.0
CLOSE_GRACE_S = 5.0
PROTOCOL_OF = {"h3": "quic", "h2": "tcp", "http/1.1": "tcp"}  # Resource Timing's nextHopProtocol -> racing.csv


class Marionette:
    """A Marionette client (``length:json`` frames; commands ``[0, id, name, params]``, replies
    ``[1, id, error, result]``)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._next = 0
        self._buf = b""
        self.hello = self._recv()

    @classmethod
    def connect(cls, port: int, *, alive: Callable[[], bool], timeout_s: float = CONNECT_TIMEOUT_S) -> Marionette:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=CALL_TIMEOUT_S)
                return cls(sock)
            except OSError as exc:
                if not alive() or time.monotonic() > deadline:
                    raise RunError(f"firefox: Marionette on 127.0.0.1:{port} did not answer ({exc})") from exc
                time.sleep(0.2)

    def _recv(self) -> Any:
        while b":" not in self._buf:
            self._more()
        size, rest = self._buf.split(b":", 1)
        while len(rest) < int(size):
            self._buf = rest
            self._more()
            rest = self._buf
        self._buf = rest[int(size):]
        return json.loads(rest[:int(size)])

    def _more(self) -> None:
        chunk = self._sock.recv(1 << 16)
        if not chunk:
            raise RunError("firefox: Marionette closed the connection")
        self._buf += chunk

    def call(self, name: str, params: dict[str, Any] | None = None) -> Any:
        self._next += 1
        data = json.dumps([0, self._next, name, params or {}]).encode()
        self._sock.sendall(str(len(data)).encode() + b":" + data)
        while True:
            reply = self._recv()
            if isinstance(reply, list) and len(reply) == 4 and reply[1] == self._next:
                break
        if reply[2]:
            raise RunError(f"firefox: {name}: {reply[2].get('error')}: {reply[2].get('message')}")
        result = reply[3]
        return result.get("value") if isinstance(result, dict) and set(result) == {"value"} else result

    def set_timeout(self, seconds: float) -> None:
        """How long a call may wait for Firefox's reply (from the connection: CALL_TIMEOUT_S)."""
        self._sock.settimeout(seconds)

    def evaluate(self, expression: str) -> Any:
        return self.call("WebDriver:ExecuteScript", {"script": f"return {expression};", "args": []})

    def quit(self) -> None:
        """Ask Firefox to quit, without waiting for its reply (it may close the socket first)."""
        self._next += 1
        data = json.dumps([0, self._next, "Marionette:Quit", {"flags": ["eForceQuit"]}]).encode()
        with contextlib.suppress(OSError):
            self._sock.sendall(str(len(data)).encode() + b":" + data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def prefs(*, transport: str, server: str, port: int) -> dict[str, Any]:
    """The profile's ``user.js``: Marionette on the loopback, HTTP/3 on (also with our CA), autoplay, nothing
    reaching outside (updates, telemetry, remote settings, captive-portal and connectivity checks)."""
    out: dict[str, Any] = {
        "marionette.port": MARIONETTE_PORT, "remote.prefs.recommended": True,
        "network.http.http3.enable": transport in ("h3", "race"),
        "network.http.http3.disable_when_third_party_roots_found": False,
        "media.autoplay.default": 0, "media.autoplay.blocking_policy": 0,
        "network.proxy.type": 0, "network.captive-portal-service.enabled": False,
        "network.connectivity-service.enabled": False, "app.update.enabled": False,
        "app.update.auto": False, "datareporting.policy.dataSubmissionEnabled": False,
        "datareporting.healthreport.uploadEnabled": False, "toolkit.telemetry.enabled": False,
        "browser.shell.checkDefaultBrowser": False, "browser.safebrowsing.malware.enabled": False,
        "browser.safebrowsing.phishing.enabled": False, "extensions.update.enabled": False,
        "services.settings.server": "", "browser.aboutwelcome.enabled": False,
        "network.dns.disablePrefetch": True, "network.prefetch-next": False,
    }
    if transport == "h3":
        out["network.http.http3.alt-svc-mapping-for-testing"] = f"{server};h3=:{port}"
    return out


def write_profile(profile: Path, *, ca: Path | None, transport: str, server: str, port: int) -> None:
    """A fresh profile: ``user.js`` (:func:`prefs`) and, over TLS, the run's CA in its NSS database."""
    profile.mkdir(parents=True, exist_ok=True)
    lines = [f"user_pref({json.dumps(k)}, {json.dumps(v)});" for k, v in prefs(transport=transport, server=server,
                                                                              port=port).items()]
    (profile / "user.js").write_text("\n".join(lines) + "\n")
    if ca is None:
        return
    certutil = shutil.which("certutil")
    if certutil is None:
        raise MissingToolError(players.CERTUTIL_HINT)
    for argv in ([certutil, "-N", "-d", f"sql:{profile}", "--empty-password"],
                 [certutil, "-A", "-d", f"sql:{profile}", "-n", "nest_experiments run CA", "-t", "C,,", "-i", str(ca)]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise RunError(f"certutil {argv[1]}: {(done.stderr or done.stdout).strip()}")


def firefox_argv(binary: str, *, profile: Path) -> list[str]:
    return [binary, "--headless", "--marionette", "--no-remote", "-profile", str(profile)]


def firefox_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "?"


def profile_pids(profile: Path) -> list[int]:
    """Firefox's processes: those whose command line has ``-profile PROFILE`` (as :func:`firefox_argv` starts it;
    not this driver, whose ``--profile PROFILE`` differs by the NUL before the option)."""
    needle = b"\0-profile\0" + str(profile).encode()
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in Path(f"/proc/{entry.name}/cmdline").read_bytes() and int(entry.name) != os.getpid():
                    pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def launched(argv: list[str], *, profile: Path, log: Path) -> Iterator[Marionette]:
    """Firefox with Marionette; on exit every process of it is gone and ``profile`` removed."""
    with log.open("wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True,
                                env={**os.environ, "MOZ_CRASHREPORTER_DISABLE": "1", "HOME": str(profile.parent),
                                     "XDG_CACHE_HOME": str(profile.parent / "cache")})  # nothing under ~root
    client = None
    try:
        client = Marionette.connect(MARIONETTE_PORT, alive=lambda: proc.poll() is None)
        yield client
    finally:
        if client is not None:
            client.quit()
            client.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=CLOSE_GRACE_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in profile_pids(profile):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=CLOSE_GRACE_S)
        shutil.rmtree(profile, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = PlayerArgs.parser(prog="python -m nest_experiments.dash.players.firefoxplayer", description=__doc__,
                          transports=players.TRANSPORTS["firefox"], abrs=players.DASHJS_ABRS,
                          default_abr=players.default_abr("firefox"), max_duration_s=600.0)
    p.add_argument("--page", required=True, help="URL path of the player page, e.g. /nest_dashjs.html")
    p.add_argument("--mpd-file", type=Path, required=True, help="the MPD on disk (levels of the representations)")
    p.add_argument("--profile", type=Path, required=True, help="Firefox's profile folder (made here, removed at the end)")
    return PlayerArgs.from_argv(argv, p)[1]


def play(args: argparse.Namespace, stop: threading.Event) -> tuple[dict[str, Any], float]:
    """Start Firefox, say ready, wait for the go, run one session; its raw material and the run's t0."""
    binary = players.firefox_path()
    if binary is None:
        raise MissingToolError(players.FIREFOX_HINT)
    write_profile(args.profile, ca=args.ca if args.transport != "tcp" else None, transport=args.transport,
                  server=args.server, port=args.port)
    url = browser.page_url(transport=args.transport, server=args.server, port=args.port, page=args.page,
                           abr=args.abr, max_buffer_s=args.max_buffer)
    events: list[dict[str, Any]] = []
    version = firefox_version(binary)
    result: dict[str, Any] = {"browser": version, "url": url, "end_reason": "stopped"}
    with launched(firefox_argv(binary, profile=args.profile), profile=args.profile,
                  log=args.out / FIREFOX_LOG) as mn:
        mn.call("WebDriver:NewSession", {"capabilities": {"alwaysMatch": {"pageLoadStrategy": "none"}}})
        t0 = browser._go(args, stop)
        if stop.is_set():
            raise RunError("stopped before the session started")
        # behind a slow link (DVL x0.25: dash.all.min.js, 0.8 MB, takes ~50 s) a script call into the loading page
        # waits for it longer than CALL_TIMEOUT_S: the session's calls may take the whole session
        mn.set_timeout(args.max_duration + CALL_TIMEOUT_S)
        mn.call("WebDriver:Navigate", {"url": url})
        _poll(mn, events, result, stop, deadline=t0 + args.max_duration)
        events.extend(mn.evaluate("window.__nest ? window.__nest.drain() : []") or [])
        result["summary"] = mn.evaluate("window.__nest ? window.__nest.summary() : null") or {}
        result["dashjs"] = mn.evaluate("window.__nest ? window.__nest.version : ''") or ""
        result["settings"] = mn.evaluate("window.__nest ? window.__nest.settings : null")
    result["events"] = events
    return result, t0


def _poll(mn: Marionette, events: list[dict[str, Any]], result: dict[str, Any], stop: threading.Event, *,
          deadline: float) -> None:
    end = dashjs.EndWatch()
    while not stop.is_set():
        stop.wait(browser.POLL_S)
        batch = mn.evaluate("window.__nest ? window.__nest.drain() : []") or []
        events.extend(batch)
        if end.done(batch, time.monotonic()):
            result["end_reason"] = "ended"
            return
        if time.monotonic() > deadline:
            result["end_reason"] = "max_duration"
            return


def bound_rows(resources: list[dict[str, Any]], origin: str, *, to_run: Callable[[float], float]) -> list[RacingRow]:
    """One ``bound`` row per request to ``origin`` with the protocol that carried it (Resource Timing). Pure."""
    prefix = f"https://{origin}"
    rows = [RacingRow(t=to_run(float(r["start"]) / 1000), event="bound",
                      protocol=PROTOCOL_OF.get(str(r.get("protocol") or ""), ""),
                      detail=str(r["url"]).removeprefix(prefix))
            for r in resources if str(r.get("url", "")).startswith(f"{prefix}/") and r.get("start") is not None]
    return sorted(rows, key=lambda r: r.t)


def write_outputs(args: argparse.Namespace, raw: dict[str, Any], t0: float, wall_minus_mono: float) -> int:
    """As :func:`.browser.write_outputs` (without a NetLog); over ``race`` ``racing.csv`` from Resource Timing."""
    race = args.transport == "race"
    count = browser.write_outputs(argparse.Namespace(**{**vars(args), "netlog": None}), raw, t0, wall_minus_mono)
    doc = json.loads((args.out / QOE).read_text())
    doc.update({"player": "firefox", "client": f"dash.js {raw.get('dashjs', '?')} in {raw.get('browser', '?')}",
                "firefox": raw.get("browser", "")})
    doc.pop("chromium", None)
    doc.pop("chromium_cpu_s", None)
    doc.pop("netlog_protocols", None)
    if race:
        def to_run(wall_s: float) -> float:
            return wall_s - wall_minus_mono - t0

        rows = bound_rows((raw.get("summary") or {}).get("resources", []), f"{args.server}:{args.port}",
                          to_run=to_run)
        write_racing(args.out / RACING, rows)
        doc["resource_protocols"] = {p: sum(r.protocol == p for r in rows) for p in ("quic", "tcp")}
    write_atomic(args.out / QOE, json.dumps(doc, indent=2) + "\n")
    return count


def main(argv: list[str] | None = None) -> int:
    return browser.player_main(parse_args(argv), play, write_outputs, browser="Firefox", log=FIREFOX_LOG)


if __name__ == "__main__":
    sys.exit(main())
