"""``racing.csv``: every QUIC/TCP connection-racing event of a session, one row each (its schema:
:class:`nest_experiments.rundir.rows.RacingRow`).

Written by our player's ``race`` transport (its policies: ``chromium``,
``firefox``, ``quic_only``, ``tcp_only``, ``dynamic``) and read back from
Chromium's NetLog for the browser reference, in one schema so that the two
can be put side by side. Times are on the run clock (s).

Events (``event``):

- ``job_started``: a connection attempt began (``protocol`` quic | tcp);
- ``connected``: its handshake completed (``value``: handshake time, s);
- ``failed``: it failed (``detail``: why: handshake timeout, reset, ...);
- ``won``: it was chosen to carry requests (the race's winner);
- ``broken``: QUIC marked broken for the origin (``detail``: the reason);
- ``backoff``: QUIC will not be tried before ``value`` s from now;
- ``recovered``: QUIC is no longer marked broken;
- ``idle_close``: an idle connection was closed (``value``: idle time, s);
- ``alt_svc``: an ``alt-svc`` header advertised h3 (``detail``: its value);
- ``probe_rtt``: one RTT probe (``value``: RTT, s) over ``protocol``;
- ``decision``: a policy's decision (``detail``: e.g. ``race`` | ``tcp_only``;
  ``value``: the ratio behind it, where there is one);
- ``stream_error``: a request failed on a connection (``detail``: the error
  and whether the response headers had come);
- ``stream_cancelled``: the player cancelled a QUIC request (its stream
  reset, the connection kept: ``detail``: why);
- ``conn_closed``: an open connection closed under requests (``detail``:
  why, e.g. ``QUIC_TOO_MANY_RTOS``; ``value``: its smoothed RTT, s, where
  known).

Read from Chromium's NetLog only (:mod:`~nest_experiments.dash.players.netlog`), the evidence of its
mechanism (docs/racing_chromium_mechanism.md):

- ``stream_reset``: the server reset a QUIC stream (``detail``: its error
  code, and whether the player had cancelled that stream first);
- ``job_delayed`` / ``job_resumed``: the TCP (main) job held back for QUIC
  (``value``: the delay, s);
- ``bound``: a request bound to a connection (``protocol``, ``conn_id``: the
  QUIC session or the job; ``detail``: the URL's path);
- ``close_frame``: a QUIC CONNECTION_CLOSE frame sent or received
  (``detail``: who, the error and its details).
"""

from __future__ import annotations

# the schema, reader and atomic writer are the run folder's (rundir.rows), re-exported for the player's modules
from nest_experiments.rundir.rows import RACING_EVENTS as EVENTS
from nest_experiments.rundir.rows import RACING_FIELDS as RACING_FIELDS
from nest_experiments.rundir.rows import RACING_PROTOCOLS as PROTOCOLS
from nest_experiments.rundir.rows import RacingRow as RacingRow
from nest_experiments.rundir.rows import read_racing as read_racing
from nest_experiments.rundir.rows import write_racing as write_racing

__all__ = ["EVENTS", "PROTOCOLS", "RACING_FIELDS", "RacingRow", "read_racing", "write_racing"]
