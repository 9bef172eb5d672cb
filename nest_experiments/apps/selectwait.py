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

The library is compiled with ``cc`` into a private temporary folder of the
run (:meth:`RunState.temp_dir`), which teardown removes: nothing is built
into the project or left on the machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from nest_experiments.errors import MissingToolError
from nest_experiments.net.procs import RunState, require_tool

SOURCE = Path(__file__).with_name("selectwait.c")
WAIT_US = 10_000
PACKAGES = "gcc libc6-dev"

_built: dict[str, Path] = {}  # run prefix -> library: one build per run, shared by its httperf apps


def compile_argv(cc: str, out: Path) -> list[str]:
    return [cc, "-O2", "-shared", "-fPIC", f"-DSELECT_WAIT_US={WAIT_US}", "-o", str(out), str(SOURCE), "-ldl"]


def preload_library(state: RunState) -> Path:
    """The run's copy of the library (built on the first call)."""
    lib = _built.get(state.prefix)
    if lib is not None and lib.exists():
        return lib
    cc = require_tool("cc", PACKAGES)
    lib = state.temp_dir("selectwait") / "selectwait.so"
    proc = subprocess.run(compile_argv(cc, lib), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise MissingToolError(f"cc could not build httperf's select wait library ({err[0] if err else proc.returncode}): "
                               f"install a C compiler and the C library headers (Debian/Ubuntu: apt-get install {PACKAGES})")
    _built[state.prefix] = lib
    return lib
