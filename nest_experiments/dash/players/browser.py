"""dash.js in headless Chromium: the player process of ``player = "dashjs"``.

    python -m nest_experiments.dash.players.browser --server ADDR --port N --transport tcp|h2|h3|race --page /PAGE \
        --mpd-file FILE --abr dynamic --max-buffer 10 --threshold 1 --profile DIR --out DIR \
        (--t0 F | --go-file FILE) [--max-duration S] [--ca FILE] [--netlog FILE]

It starts Debian's ``chromium`` (``--headless``, in the namespace it runs in)
with its DevTools protocol on a pipe (``--remote-debugging-pipe``: fds 3 and
4, no port, nothing on the emulated link), opens our page
(``web/dashjs_player.html``, served by the run's DASH origin from the media
folder, with ``dash.all.min.js`` beside it), and every
:data:`POLL_S` drains the page's dash.js events with ``Runtime.evaluate``.
Events are read back this way rather than posted to the origin because a
POST would cross the bottleneck and compete with the media, and neither
Caddy nor our server stores requests.

Chromium starts before the driver says it is ready; the page is opened at
the go (the run's start of this app). Whoever starts the driver waits for
the namespace's IPv6 addresses to settle first (DAD: Chromium aborts requests
in flight on any address change; apps.dash does, through ``net.sockets``).
When the media ended (or ``--max-duration``, or SIGTERM), it reads the page's
Resource Timing entries and playback counters, closes Chromium, kills its
whole process group (Chromium forks a zygote, renderers, a GPU and a network
process) and anything else still using its profile, removes the profile,
and writes ``segments.csv``, ``abr_decisions.csv``, ``qoe.json`` (as
:mod:`.client` does, converted by :mod:`.dashjs`) and ``events.json`` (the
raw events). HTTP/3: ``--enable-quic --origin-to-force-quic-on=ADDR:PORT``;
h2/h3: the server's certificate accepted by its SPKI hash
(``--ignore-certificate-errors-spki-list``). ``race``: no forcing; Chromium
discovers QUIC as a browser does (see :func:`chromium_argv`) and races it
with TCP by itself; ``racing.csv`` holds its racing events from the NetLog
(:mod:`.netlog`) and each segment's ``transport`` is the protocol that
carried it (``tcp`` or ``h3``). Chromium never resolves a name
(``--host-resolver-rules``), runs no background services, and the
namespace has no route out.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nest_experiments.dash import players
from nest_experiments.dash.content.mpd import parse_mpd
from nest_experiments.dash.core import qoe, records
from nest_experiments.dash.players import dashjs, netlog
from nest_experiments.dash.players.playerargs import PlayerArgs
from nest_experiments.errors import MissingToolError, NestExpError, RunError
from nest_experiments.rundir import CHROMIUM_LOG, DECISIONS, PLAYER_EVENTS, QOE, RACING, SEGMENTS, write_atomic
from nest_experiments.rundir.rows import write_decisions, write_racing, write_segments

POLL_S = 0.5
CDP_TIMEOUT_S = 30.0
CLOSE_GRACE_S = 5.0


class Cdp:
    """A DevTools-protocol client on Chromium's pipe (NUL-separated JSON messages). ``keep_events``: every event
    (a message without an id) is kept in :attr:`events` (a test's page watches its console and requests)."""

    def __init__(self, write_fd: int, read_fd: int, *, keep_events: bool = False) -> None:
        self._w, self._r = write_fd, read_fd
        self._next = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._keep_events = keep_events
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._closed = False
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            *messages, buf = buf.split(b"\0")
            with self._cond:
                for raw in messages:
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    elif self._keep_events:
                        self.events.append(msg)
                self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None,
             timeout_s: float = CDP_TIMEOUT_S) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._next not in self._replies:
                if self._closed or time.monotonic() > deadline:
                    raise RunError(f"chromium: no reply to {method} (closed: {self._closed})")
                self._cond.wait(0.1)
            reply = self._replies.pop(self._next)
        if "error" in reply:
            raise RunError(f"chromium: {method}: {reply['error'].get('message')}")
        return dict(reply.get("result", {}))

    def wait_event(self, method: str, timeout_s: float = CDP_TIMEOUT_S) -> dict[str, Any]:
        """The first kept event named ``method`` (``keep_events``), waiting up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for e in self.events:
                    if e.get("method") == method:
                        return e
                if self._closed or time.monotonic() > deadline:
                    raise RunError(f"chromium: no {method} event within {timeout_s:g} s")
                self._cond.wait(0.1)


def spki_hash(pem: bytes) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo)) of a PEM certificate, as ``--ignore-certificate-errors-spki-list`` wants."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(pem)
    der = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


#: ``race``: a port of the origin's host that serves nothing, on which QUIC is "forced" (see :func:`chromium_argv`)
UNKNOWN_ROOT_PORT = 9


def chromium_argv(binary: str, *, profile: Path, transport: str, server: str, port: int, spki: list[str],
                  netlog: Path | None) -> list[str]:
    """Chromium's command line: headless, no outside contact; QUIC forced for our origin over h3, discovered
    over ``race``.

    ``race``: ``--enable-quic``, and the page over https (h2 over TLS) whose
    responses carry Caddy's ``alt-svc: h3=":PORT"``; Chromium then starts its
    QUIC job beside the TCP one for the next requests (HttpStreamFactory's
    JobController). Our certificate is accepted by its SPKI hash, which
    makes it valid for TCP (and so the alt-svc header is taken: Chromium ignores
    alt-svc from a response with a certificate error), but Chromium's QUIC
    refuses any certificate that does not chain to a root built into the
    browser (``ERR_QUIC_CERT_ROOT_NOT_KNOWN``) unless the host is among the
    hosts of ``--origin-to-force-quic-on`` (net/quic/crypto/proof_verifier_chromium.cc
    ``ShouldAllowUnknownRootForHost``, fed by ``HostsFromOrigins(origins_to_force_quic_on)``
    in net/quic/quic_session_pool.cc). That list holds hosts, not ports: QUIC is
    "forced" on :data:`UNKNOWN_ROOT_PORT` of the server, where nothing is asked
    for, and the origin's own port stays unforced, so its QUIC is discovered
    and raced.
    """
    argv = [binary, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-extensions", "--disable-breakpad", "--metrics-recording-only",
            "--enable-automation", "--disable-client-side-phishing-detection", "--disable-domain-reliability",
            "--disable-component-extensions-with-background-pages", "--no-pings", "--password-store=basic",
            "--use-mock-keychain", "--allow-browser-signin=false", "--disable-dev-shm-usage",
            "--no-proxy-server", f"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {server}", "--mute-audio",
            "--autoplay-policy=no-user-gesture-required", "--disable-features=MediaRouter,OptimizationHints,Translate",
            f"--user-data-dir={profile}", "--remote-debugging-pipe"]
    if os.geteuid() == 0:
        argv.append("--no-sandbox")
    if transport == "h3":
        argv += ["--enable-quic", f"--origin-to-force-quic-on={server}:{port}"]
    elif transport == "race":
        argv += ["--enable-quic", f"--origin-to-force-quic-on={server}:{UNKNOWN_ROOT_PORT}"]
    if spki:
        argv.append(f"--ignore-certificate-errors-spki-list={','.join(spki)}")
    if netlog is not None:
        argv += [f"--log-net-log={netlog}", "--net-log-capture-mode=Default"]
    return argv


def page_url(*, transport: str, server: str, port: int, page: str, abr: str, max_buffer_s: float) -> str:
    scheme = "http" if transport == "tcp" else "https"
    return f"{scheme}://{server}:{port}{page}?mpd=manifest.mpd&abr={abr}&max_buffer={max_buffer_s:g}"


def chromium_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "?"


@contextlib.contextmanager
def launched(argv: list[str], *, profile: Path, log: Path) -> Iterator[Cdp]:
    """Chromium with its DevTools pipe; on exit every process of it is gone and ``profile`` removed."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()

    def fds() -> None:
        os.dup2(to_child_r, 3)
        os.dup2(from_child_w, 4)

    profile.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, preexec_fn=fds,
                                pass_fds=(3, 4), start_new_session=True)
    os.close(to_child_r)
    os.close(from_child_w)
    try:
        yield Cdp(to_child_w, from_child_r)
    finally:
        with contextlib.suppress(OSError):
            os.write(to_child_w, json.dumps({"id": 10**9, "method": "Browser.close"}).encode() + b"\0")
        try:
            proc.wait(timeout=CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        kill_all(proc.pid, profile)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=CLOSE_GRACE_S)
        for fd in (to_child_w, from_child_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(profile, ignore_errors=True)


def kill_all(pgid: int, profile: Path) -> None:
    """SIGKILL Chromium's process group and any process whose command line names its profile."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    for pid in profile_pids(profile):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def chromium_cpu_s(profile: Path) -> float:
    """User + system CPU seconds so far of Chromium's processes (those naming ``profile``) and the children they
    reaped (``/proc/PID/stat`` utime, stime, cutime, cstime)."""
    clk = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in profile_pids(profile):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])
    return total / clk


def profile_pids(profile: Path) -> list[int]:
    """Processes whose command line names ``profile`` (Chromium passes --user-data-dir to its helpers)."""
    needle = f"--user-data-dir={profile}".encode()
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = PlayerArgs.parser(prog="python -m nest_experiments.dash.players.browser", description=__doc__,
                          transports=players.TRANSPORTS["dashjs"], abrs=players.DASHJS_ABRS,
                          default_abr=players.default_abr("dashjs"), max_duration_s=600.0)
    p.add_argument("--page", required=True, help="URL path of the player page, e.g. /nest_dashjs.html")
    p.add_argument("--mpd-file", type=Path, required=True, help="the MPD on disk (levels of the representations)")
    p.add_argument("--profile", type=Path, required=True, help="Chromium's user-data-dir (removed at the end)")
    p.add_argument("--netlog", type=Path, help="write Chromium's NetLog here")
    return PlayerArgs.from_argv(argv, p)[1]  # --ca: its SPKI hash is accepted over h2/h3


def play(args: argparse.Namespace, stop: threading.Event) -> tuple[dict[str, Any], float]:
    """Start Chromium, say ready, wait for the go (or take ``--t0``), run one session; return its raw material
    (events, summary, versions) and the run's t0."""
    binary = players.chromium_path()
    if binary is None:
        raise MissingToolError(players.CHROMIUM_HINT)
    spki = [spki_hash(args.ca.read_bytes())] if args.ca and args.transport != "tcp" else []
    argv = chromium_argv(binary, profile=args.profile, transport=args.transport, server=args.server, port=args.port,
                         spki=spki, netlog=args.netlog)
    url = page_url(transport=args.transport, server=args.server, port=args.port, page=args.page, abr=args.abr,
                   max_buffer_s=args.max_buffer)
    events: list[dict[str, Any]] = []
    result: dict[str, Any] = {"chromium": chromium_version(binary), "url": url, "end_reason": "stopped"}
    with launched(argv, profile=args.profile, log=args.out / CHROMIUM_LOG) as cdp:
        result["browser"] = cdp.call("Browser.getVersion").get("product", "")
        target = cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        t0 = _go(args, stop)
        if stop.is_set():
            raise RunError("stopped before the session started")
        cdp.call("Page.navigate", {"url": url}, session=session)
        _poll(cdp, session, events, result, stop, deadline=t0 + args.max_duration)
        events.extend(_evaluate(cdp, session, "window.__nest ? window.__nest.drain() : []") or [])
        result["summary"] = _evaluate(cdp, session, "window.__nest ? window.__nest.summary() : null") or {}
        result["dashjs"] = _evaluate(cdp, session, "window.__nest ? window.__nest.version : ''") or ""
        result["settings"] = _evaluate(cdp, session, "window.__nest ? window.__nest.settings : null")
        result["chromium_cpu_s"] = round(chromium_cpu_s(args.profile), 2)
    result["events"] = events
    return result, t0


def _go(args: argparse.Namespace, stop: threading.Event) -> float:
    """Say we are ready (as :func:`.client.wait_for_go`), then the go file's t0 (or ``--t0``, or now)."""
    if args.go_file is None:
        return args.t0 if args.t0 is not None else time.monotonic()
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    while not stop.wait(0.02):
        try:
            return float(json.loads(args.go_file.read_text())["t0"])
        except (OSError, ValueError, KeyError):
            continue
    return time.monotonic()


def _poll(cdp: Cdp, session: str, events: list[dict[str, Any]], result: dict[str, Any], stop: threading.Event, *,
          deadline: float) -> None:
    end = dashjs.EndWatch()
    while not stop.is_set():
        stop.wait(POLL_S)
        batch = _evaluate(cdp, session, "window.__nest ? window.__nest.drain() : []") or []
        events.extend(batch)
        if end.done(batch, time.monotonic()):
            result["end_reason"] = "ended"
            return
        if time.monotonic() > deadline:
            result["end_reason"] = "max_duration"
            return


def _evaluate(cdp: Cdp, session: str, expression: str) -> Any:
    reply = cdp.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
    return reply.get("result", {}).get("value")


def write_outputs(args: argparse.Namespace, raw: dict[str, Any], t0: float, wall_minus_mono: float) -> int:
    """segments.csv, abr_decisions.csv, qoe.json, events.json; the number of media segments."""
    manifest = parse_mpd(args.mpd_file.read_text())

    def to_run(wall_s: float) -> float:
        return wall_s - wall_minus_mono - t0

    summary = raw.get("summary") or {}
    session = dashjs.convert(raw["events"], summary.get("resources", []), manifest, to_run=to_run,
                             transport=args.transport, abr=args.abr)
    write_segments(args.out / SEGMENTS, session.segments)
    write_decisions(args.out / DECISIONS, session.decisions)
    summary_qoe = qoe.summarize(session.segments, startup_delay_s=session.startup_delay_s, threshold_s=args.threshold,
                                stall_at_end=session.stall_at_end)
    from dataclasses import asdict

    doc = {
        "transport": args.transport, "player": "dashjs",
        "client": f"dash.js {raw.get('dashjs', '?')} in {raw.get('browser') or raw.get('chromium', '?')}",
        "chromium": raw.get("chromium", ""), "url": raw.get("url", ""), "abr": args.abr, "dashjs_settings": raw.get("settings"),
        "end_reason": raw["end_reason"] if raw["end_reason"] != "ended" or session.ended else "stopped",
        "stalls": len(session.stalls), "errors": list(session.errors), "abandoned": records.abandoned(session.decisions),
        "stall_at_end": None if session.stall_at_end is None else session.stall_at_end.as_dict(),
        "played_s": summary.get("current_time"), "frames_decoded": summary.get("frames"),
        "frames_dropped": summary.get("dropped_frames"), "media_error": summary.get("error"),
        "protocols": dashjs.protocols(summary.get("resources", [])),
        "chromium_cpu_s": raw.get("chromium_cpu_s"),  # Chromium's processes, at the end of the session
        "qoe": {name: asdict(s) for name, s in summary_qoe.items()},
    }
    if args.transport == "race":
        doc["netlog_protocols"] = write_racing_events(args, to_run)
    return _finish(args, doc, raw, summary, session)


def write_racing_events(args: argparse.Namespace, to_run: Callable[[float], float]) -> dict[str, int]:
    """``racing.csv`` from Chromium's NetLog (:mod:`.netlog`); how many requests to the origin went over each
    protocol. Without a NetLog (Chromium died before writing it) the file has a header only."""
    origin = f"{args.server}:{args.port}"
    try:
        doc = json.loads(args.netlog.read_text()) if args.netlog else None
    except (OSError, ValueError):
        doc = None
    write_racing(args.out / RACING, netlog.racing_rows(doc, origin, to_run=to_run) if doc else [])
    counts: dict[str, int] = {}
    for _, protocol in netlog.request_protocols(doc, origin) if doc else []:
        counts[protocol] = counts.get(protocol, 0) + 1
    return counts


def _finish(args: argparse.Namespace, doc: dict[str, Any], raw: dict[str, Any], summary: dict[str, Any],
            session: dashjs.Session) -> int:
    write_atomic(args.out / QOE, json.dumps(doc, indent=2) + "\n")
    write_atomic(args.out / PLAYER_EVENTS, json.dumps({"events": raw["events"], "summary": summary}) + "\n")
    return len(session.segments)


PlayFn = Callable[[argparse.Namespace, threading.Event], tuple[dict[str, Any], float]]
WriteFn = Callable[[argparse.Namespace, dict[str, Any], float, float], int]


def player_main(args: argparse.Namespace, play: PlayFn, write: WriteFn, *, browser: str, log: str) -> int:
    """A browser player's process: play until the page ends or SIGTERM, write the outputs, print the summary;
    an error is one line on stderr and exit status 1 (Chromium here, Firefox in :mod:`.firefoxplayer`)."""
    wall_minus_mono = time.time() - time.monotonic()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        raw, t0 = play(args, stop)
        count = write(args, raw, t0, wall_minus_mono)
        if count == 0:
            raise RunError(f"dash.js in {browser} received no media segment ({raw['end_reason']}; see "
                           f"{args.out}/events.json, {log})")
    except NestExpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: dash.js player ({browser}): {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"segments": count, "end_reason": raw["end_reason"]}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    return player_main(parse_args(argv), play, write_outputs, browser="Chromium", log=CHROMIUM_LOG)


if __name__ == "__main__":
    sys.exit(main())
