"""``run --until-decided`` in the VM runtime: one VM for every block, not one per block.

Each block used to be its own VM sweep: boot (~7 s), the guest's Python start (~12 s) and a warm-up run (~50 s)
before its runs, ~70 s of every block of six 65 s runs. Here one guest serves the whole invocation: it runs
``python -m nest_experiments serve-blocks INBOX`` (:func:`serve`), which waits for the host's block commands in
``INBOX`` (a folder in the results folder, which the guest sees read-write) and runs each in its one Python
process, so that block 2 on starts with its imports done (``block-K.json``: the argv of a ``run --only ... --reps K``
command, as :mod:`.launch` builds it for one VM sweep; ``block-K.done``: its exit code). The warm-up runs
once, before the first run that is not skipped (a resumed sweep's completed blocks warm nothing;
``runtime.note_warm``): the guest stays warm between blocks. Between blocks the guest waits (polling the inbox) while the host matches the block's captures, writes its
load into the block's manifests and judges the claims, as it does after a VM sweep.

The VM runs in the main thread (qemu's SIGTERM handling needs it); the blocks are driven from a second thread
(:class:`Blocks`). When that thread ends, for any reason, it writes ``stop`` and the guest powers off; when the VM
ends first (killed, timed out, crashed), the driver's wait fails with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nest_experiments.config.sweep import RunSpec
from nest_experiments.errors import NestExpError, RunError

POLL_S = 0.2  # the guest's and the host's look at the inbox
STOP = "stop"


def command_file(inbox: Path, block: int) -> Path:
    return inbox / f"block-{block}.json"


def done_file(inbox: Path, block: int) -> Path:
    return inbox / f"block-{block}.done"


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- guest


def serve(inbox: Path, run: Callable[[list[str], dict[str, str]], int], *, poll_s: float = POLL_S,
          sleep: Callable[[float], None] = time.sleep) -> int:
    """The guest's loop: run block 1, 2, ... as their commands appear in ``inbox`` until ``stop`` does; each
    block's exit code goes to its ``.done`` file. ``run(argv, env)`` runs one command."""
    block = 1
    while True:
        cmd = command_file(inbox, block)
        if cmd.is_file():
            doc = json.loads(cmd.read_text(encoding="utf-8"))
            env = {str(k): str(v) for k, v in doc.get("env", {}).items()}
            code = run([str(a) for a in doc["argv"]], env)
            write_atomic(done_file(inbox, block), {"exit_code": code})
            block += 1
        elif (inbox / STOP).exists():
            return 0
        else:
            sleep(poll_s)


def run_in_process(argv: list[str], env: dict[str, str], cli_main: Callable[[list[str]], int]) -> int:
    """One block: the ``run`` command (``python -m nest_experiments run ...``) in this process, whose imports
    are done since block 1 (a process per block would import again during its first run's setup: ~3.5 s of the
    guest's CPU in the test's runs); an error that escapes the command is its exit code 1, and the next block
    still runs."""
    import traceback

    if argv[1:3] != ["-m", "nest_experiments"]:
        raise NestExpError(f"not a nest_experiments command: {argv[:3]}")
    os.environ.update(env)
    try:
        return cli_main(argv[3:])
    except Exception:  # noqa: BLE001 - the block fails, the guest goes on serving
        traceback.print_exc()
        return 1


# --------------------------------------------------------------------------- host


class Blocks:
    """The host's side: hands the guest one block at a time and waits for it (``execute``, from the driver
    thread); ``after_block(runs, record)`` does the host's work on the block's runs (captures, load) and fills its record."""

    def __init__(self, inbox: Path, *, block_argv: Callable[[list[RunSpec]], list[str]],
                 after_block: Callable[[list[RunSpec], dict[str, Any]], None],
                 env: Callable[[list[RunSpec]], dict[str, str]] | None = None, poll_s: float = POLL_S) -> None:
        self.inbox, self.block_argv, self.after_block, self.env = inbox, block_argv, after_block, env
        self.poll_s = poll_s
        self.block = 0
        self.vm_ended = threading.Event()
        self.vm_error = ""

    def execute(self, runs: list[RunSpec]) -> int:
        self.block += 1
        record: dict[str, Any] = {"block": self.block}
        t0 = time.monotonic()
        write_atomic(command_file(self.inbox, self.block),
                     {"argv": self.block_argv(runs), "env": self.env(runs) if self.env else {}})
        done = done_file(self.inbox, self.block)
        while not done.is_file():
            if self.vm_ended.is_set():
                raise RunError(f"the VM ended before block {self.block} finished"
                               f"{': ' + self.vm_error if self.vm_error else ''}")
            time.sleep(self.poll_s)
        code = int(json.loads(done.read_text(encoding="utf-8"))["exit_code"])
        record["vm"] = round(time.monotonic() - t0, 3)
        self.after_block(runs, record)
        return code

    def stop(self) -> None:
        write_atomic(self.inbox / STOP, {})


def drive_in_vm(blocks: Blocks, drive: Callable[[Callable[[list[RunSpec]], int]], None],
                enter: Callable[[], Any]) -> Any:
    """Run ``enter()`` (the VM, whose guest serves ``blocks.inbox``) in this thread and ``drive(blocks.execute)``
    in another; the guest stops when the driver ends. Returns ``enter()``'s result; the driver's exception, if it
    raised, is raised here (after the VM is down)."""
    failure: list[BaseException] = []

    def driver() -> None:
        try:
            drive(blocks.execute)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            failure.append(exc)
        finally:
            blocks.stop()

    thread = threading.Thread(target=driver, name="until-decided", daemon=True)
    thread.start()
    try:
        result = enter()
    except BaseException as exc:
        blocks.vm_error = str(exc) or type(exc).__name__
        raise
    finally:
        blocks.vm_ended.set()
        thread.join(timeout=60)
    if failure:
        raise failure[0]
    if thread.is_alive():
        raise NestExpError("the until-decided driver did not stop after the VM ended")
    return result


def new_inbox(results: Path, inputs: str) -> Path:
    """A fresh inbox ``<results>/<inputs>/<pid>-blocks`` (what a killed runner left is removed first)."""
    from nest_experiments.vm.qemu import clean_stale

    folder = results / inputs
    clean_stale(folder)
    inbox = folder / f"{os.getpid()}-blocks"
    shutil.rmtree(inbox, ignore_errors=True)
    inbox.mkdir(parents=True)
    return inbox

