"""TCP socket sampler: per subflow (and so per path) bytes, and each socket's congestion state, over time.

Every ``interval_s`` one ``ss -tinH`` in the client's namespace lists the TCP
sockets towards the server's port; the subflows of an MPTCP connection are
TCP sockets there, with their own ``bytes_received``/``bytes_sent``. The
media flows from the server to the client, and a multi-homed server sends
from each address through that address's link (source routing), so the
server-side address names the path: ``link`` is the server's link of the
subflow's remote address, ``client_link`` the client's link of its local
one (they need not be on the same path: the routers route by destination).

With ``server_ns`` a second ``ss`` lists the same connections from the
server's end (``side`` "server"): the sender's ``tcp_info`` (cwnd, smoothed
RTT and its variance, pacing and delivery rate, retransmits, ECN negotiated /
CE seen; :data:`nest_experiments.parsers.ss.STATE_FIELDS`), what the
transport was doing while the media came. Byte shares per path read the
client's rows (``side`` "client"); a server row counts the same bytes again.
(A process per sample costs ~5 ms on the host and more under TCG: once a
second on the host, every 5 s in the whole-experiment guest.)
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import Any

from nest_experiments.net.sockets import established_argv
from nest_experiments.parsers.ss import STATE_FIELDS, tcp_sockets

CLIENT, SERVER = "client", "server"  # the side column: whose namespace the row was read in
FIELDS = ("t", "app", "side", "local", "local_port", "remote", "remote_port", "link", "client_link", "mptcp",
          "bytes_received", "bytes_sent", "bytes_acked", "bytes_retrans", "rtt_ms", *STATE_FIELDS)


class SubflowSampler:
    def __init__(self, *, app: str, ns: str, port: int, link_of: Mapping[str, str], clock: Callable[[], float],
                 interval_s: float = 1.0, server_ns: str | None = None) -> None:
        """``link_of``: address -> link name, for the server's and the client's addresses. ``server_ns``: also
        read the connections at the server's end (the sender's congestion state)."""
        self.app = app
        self.argvs = [(CLIENT, established_argv(ns, port))]
        if server_ns is not None:
            self.argvs.append((SERVER, established_argv(server_ns, port, local=True)))
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
        for side, argv in self.argvs:
            t = self.clock()
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout
            except (OSError, subprocess.SubprocessError):
                self.errors += 1
                continue
            self.rows.extend(self.rows_of(side, t, out))

    def rows_of(self, side: str, t: float, out: str) -> list[dict[str, Any]]:
        """One row per socket in one ``ss`` output read at ``t`` on ``side``: the server's address names the path
        (the remote one of a client row, the local one of a server row)."""
        rows = []
        for sock in tcp_sockets(out):
            server, client = (sock["remote"], sock["local"]) if side == CLIENT else (sock["local"], sock["remote"])
            rows.append({"t": round(t, 3), "app": self.app, "side": side, "link": self.link_of.get(server, ""),
                         "client_link": self.link_of.get(client, ""),
                         **{k: sock[k] for k in FIELDS if k in sock}})
        return rows

    def _loop(self) -> None:
        next_t = self.clock()
        while not self._stop.is_set():
            self.sample()
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - self.clock()))
        self.sample()
