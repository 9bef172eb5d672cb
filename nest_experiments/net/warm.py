"""Python programs started warm: the interpreter and the program's imports paid before the run needs them.

Our Python apps (the DASH server and player, the object downloader) run as
``python -m MODULE``. Under the TCG VM such a process takes seconds before it
does anything: the default sweep's video app (our server and player, aioquic,
cryptography, h2, numpy) spent 5.7-9.7 s of each 89 s run in ``app_prepare``,
and the runner waits for it (bench/phase_split.py). A :class:`WarmPool` starts
one process per module the run will need before the run needs it (in a sweep
as the run before ends its traffic, so that its imports overlap that run's
collection and teardown; else as the run begins, overlapping the cleanup and
the topology build); when an app spawns that module, it gets the warm
process, which then

- points its stdout and stderr at the app's logs and reads nothing more,
- joins the node's network namespace (``setns``: ``ip netns exec``'s network
  part; not its mount namespace, its ``/sys`` or ``/etc/netns`` bind mounts,
  which none of our Python programs reads), its working directory and timer
  slack,
- and runs the module as ``python -m`` does (``runpy``, as ``__main__``, with
  the app's arguments). The module was imported once already: its work must
  sit under ``if __name__ == "__main__":`` (tests/unit/test_warm_modules.py
  checks ours).

It is the app's process from then on (the same pid, a child of the runner, so
``Popen`` waits for it and the CPU monitor reads it). Warm processes that no
app took are released at the end of the run (stdin closed: they exit 0); like
every process of ours they die with the runner (``PR_SET_PDEATHSIG``, procs.dies_with_parent).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import subprocess
import sys
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NoReturn

from nest_experiments.net import procs

RELEASE_TIMEOUT_S = 5.0  # a released warm process still importing is killed after this long


def warm_module(argv: Sequence[str]) -> str | None:
    """The module of ``python -m MODULE ...`` when run with this interpreter; else None (a warm process can
    only stand in for our interpreter running a module)."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
        return argv[2]
    return None


class WarmPool:
    """Warm processes by module; :meth:`take` hands one to an app, :meth:`close` releases the rest."""

    def __init__(self) -> None:
        self._idle: dict[str, list[subprocess.Popen[bytes]]] = {}
        self.started: list[str] = []  # the modules that an app took warm, in order

    def start(self, modules: Iterable[str]) -> None:
        """One warm process per entry (a module listed twice gets two)."""
        for module in modules:
            proc = subprocess.Popen(procs.dies_with_parent([sys.executable, "-m", __name__, module]),
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            self._idle.setdefault(module, []).append(proc)

    def take(self, ns: str, argv: Sequence[str], *, stdout: Path, stderr: Path | None = None,
             cwd: Path | None = None, timer_slack_ns: int | None = None) -> subprocess.Popen[bytes] | None:
        """A warm process running ``argv`` in namespace ``ns``, its output appended to ``stdout`` (and
        ``stderr``; None: into ``stdout``); None when there is none for its module (start it cold)."""
        module = warm_module(argv)
        idle = self._idle.get(module or "", [])
        while idle:
            proc = idle.pop(0)
            command = {"ns": ns, "args": list(argv[3:]), "stdout": str(stdout),
                       "stderr": str(stderr) if stderr is not None else None,
                       "cwd": str(cwd) if cwd is not None else None, "timer_slack_ns": timer_slack_ns}
            try:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps(command).encode() + b"\n")
                proc.stdin.close()
            except OSError:  # it died while warming (killed): the next one, or a cold start
                procs.stop(proc)
                continue
            self.started.append(module or "")
            return proc
        return None

    def close(self) -> None:
        """Release every process no app took: stdin closed, each exits; killed if it does not in time."""
        idle = [p for ps in self._idle.values() for p in ps]
        self._idle.clear()
        for proc in idle:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()
        for proc in idle:
            try:
                proc.wait(timeout=RELEASE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _redirect(stdout: str, stderr: str | None) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    out = os.open(stdout, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    err = os.open(stderr, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if stderr else out
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in {out, err}:
        os.close(fd)


def main(module: str) -> int:
    """The warm process: import ``module``, wait for the command on stdin, run it (see the module's doc)."""
    try:
        importlib.import_module(module)
        failed = ""
    except BaseException:  # reported where the app looks: its stderr log, once it is known
        failed = traceback.format_exc()
    gc.collect()
    gc.freeze()  # the imports stay: the program's full collections walk only what it allocates itself
    line = sys.stdin.buffer.readline()
    if not line:
        return 0  # released unused
    command = json.loads(line)
    _redirect(command["stdout"], command["stderr"])
    if failed:
        sys.stderr.write(failed)
        return 1
    procs.enter_netns(command["ns"])
    if command["cwd"]:
        os.chdir(command["cwd"])
    procs.set_timer_slack(command["timer_slack_ns"])
    sys.argv = [module, *command["args"]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exit_status(exc.code)
    return 0


def exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` ends a process with (a message is printed to stderr, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish(status: int) -> NoReturn:
    """End the process with ``status`` without the interpreter's finalization: the program wrote and closed
    its outputs; what is left is freeing every module and object one by one, ~60 ms of CPU for the player
    here and ~8x that in the TCG guest, in the middle of a run's traffic (the player's last second was a
    saturated window of the default sweep in 4 of 36 sessions). stdout and stderr are flushed first."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    finish(main(sys.argv[1]))
