"""MPTCP subflow sampler: bytes per subflow (and so per path) over time.

Every ``interval_s`` one ``ss -tinH`` in the client's namespace lists the TCP
sockets towards the server's port; the subflows of an MPTCP connection are
TCP sockets there, with their own ``bytes_received``/``bytes_sent``. The
media flows from the server to the client, and a multi-homed server sends
from each address through that address's link (source routing), so the
server-side address names the path: ``link`` is the server's link of the
subflow's remote address, ``client_link`` the client's link of its local
one (they need not be on the same path: the routers route by destination).
(A process per sample costs ~5 ms on the host and more under TCG; once a
second is plenty for a path split.)
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import Any

from nest_experiments.net.sockets import established_argv
from nest_experiments.parsers.ss import tcp_sockets

FIELDS = ("t", "app", "local", "local_port", "remote", "remote_port", "link", "client_link", "mptcp", "bytes_received",
          "bytes_sent", "bytes_retrans", "rtt_ms")


class SubflowSampler:
    def __init__(self, *, app: str, ns: str, port: int, link_of: Mapping[str, str], clock: Callable[[], float],
                 interval_s: float = 1.0) -> None:
        """``link_of``: address -> link name, for the server's and the client's addresses."""
        self.app = app
        self.argv = established_argv(ns, port)
        self.link_of = dict(link_of)
        self.clock = clock
        self.interval_s = interval_s
        self.rows: list[dict[str, Any]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"subflows-{app}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Take a last sample (the connection may be gone by then) and end the thread."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()

    def sample(self) -> None:
        t = self.clock()
        try:
            out = subprocess.run(self.argv, capture_output=True, text=True, timeout=10, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            self.errors += 1
            return
        for sock in tcp_sockets(out):
            self.rows.append({"t": round(t, 3), "app": self.app, "link": self.link_of.get(sock["remote"], ""),
                              "client_link": self.link_of.get(sock["local"], ""),
                              **{k: sock[k] for k in FIELDS if k in sock}})

    def _loop(self) -> None:
        next_t = self.clock()
        while not self._stop.is_set():
            self.sample()
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - self.clock()))
        self.sample()
