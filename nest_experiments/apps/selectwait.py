"""httperf without the busy loop: ``selectwait.c``, built once per run and preloaded into httperf.

Debian's httperf 0.9.0 is built without ``DONT_POLL``: its event loop calls
``select()`` with a zero timeout, so it spins a whole CPU whatever the
request rate (99.9% of a core at 15 requests/s on the host; 0.8% with this
library, with the same reply times). The library makes that ``select()``
wait up to ``WAIT_US`` for a ready socket, then report the socket on
httperf's next loop, after it has read the clock (``selectwait.c`` says
how): httperf's time stamps stay exact, and only its timers (the connection
rate, the timeouts) fire up to ``WAIT_US`` late.

``WAIT_US`` is 10 ms, not the 1 ms of httperf's own ``DONT_POLL`` build: in
the VM runtime's TCG guest one wake-up cost httperf ~45 us of CPU, so 1000
a second took its whole 5% cap (default experiment, FQ-PIE 5 ms: 3.3 CPU-s
in 66 s, throttled in 99.8% of the cap's periods).

The library is compiled once per source and build flags into the project's
cache (``resources.cache_dir("selectwait")``: ``.cache/selectwait/<hash>.so`` in a clone, beside the
VM's kernel image: a cache,
rebuilt when the source changes); the VM runtime builds it on the host
before the guest boots (``cc`` under TCG took several seconds of every
run's set-up, once per run), and the guest, which sees the project
read-only, loads that copy. Where the cache cannot be written (a read-only
install, or a guest whose host did not build it), it is compiled into a
private temporary folder of the run (:meth:`RunState.temp_dir`), which
teardown removes, as before.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from nest_experiments import resources
from nest_experiments.errors import MissingToolError
from nest_experiments.net.procs import RunState, require_tool

SOURCE = Path(__file__).with_name("selectwait.c")
WAIT_US = 10_000
PACKAGES = "gcc libc6-dev"

CACHE_DIR = resources.cache_dir("selectwait")
_built: dict[str, Path] = {}  # run prefix -> library: one build per run, shared by its httperf apps


def compile_argv(cc: str, out: Path) -> list[str]:
    return [cc, "-O2", "-shared", "-fPIC", f"-DSELECT_WAIT_US={WAIT_US}", "-o", str(out), str(SOURCE), "-ldl"]


def cached_library(cache: Path = CACHE_DIR) -> Path:
    """Where the cache holds the library for this source and these flags."""
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(compile_argv("cc", Path("x"))).encode()).hexdigest()[:16]
    return cache / f"selectwait-{key}.so"


def build_cached(cache: Path = CACHE_DIR) -> Path | None:
    """The cached library, built now if missing (the VM runtime calls this on the host); None when the cache
    cannot be written (the caller then builds a run's own copy)."""
    lib = cached_library(cache)
    if lib.exists():
        return lib
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = lib.with_name(f".{lib.name}.{os.getpid()}.tmp")
        _compile(tmp)
        os.replace(tmp, lib)  # whole or not at all: a reader never loads half a library
    except OSError:
        return None
    return lib


def preload_library(state: RunState, cache: Path = CACHE_DIR) -> Path:
    """The library to preload: the cached one (built here when the cache is writable), else the run's own copy
    (built on the first call of the run)."""
    lib = _built.get(state.prefix)
    if lib is not None and lib.exists():
        return lib
    lib = cached_library(cache) if cached_library(cache).exists() else build_cached(cache)
    if lib is None:
        lib = state.temp_dir("selectwait") / "selectwait.so"
        _compile(lib)
    _built[state.prefix] = lib
    return lib


def _compile(out: Path) -> None:
    cc = require_tool("cc", PACKAGES)
    proc = subprocess.run(compile_argv(cc, out), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise MissingToolError(f"cc could not build httperf's select wait library ({err[0] if err else proc.returncode}): "
                               f"install a C compiler and the C library headers (Debian/Ubuntu: apt-get install {PACKAGES})")
