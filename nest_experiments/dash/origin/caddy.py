"""Caddy (quic-go) as the DASH origin: which binary, and its JSON configuration (pure).

The binary is the one ``./setup.sh`` builds into the venv's ``bin`` from
``native/caddy`` (Caddy 2.11.9 at this writing: its quic-go sends with UDP
GSO, which roughly halved the server's CPU per byte over h3 in the TCG guest,
``bench/player_cpu.py``), else the ``caddy`` on PATH (Debian 12's is 2.6.2);
``NEST_EXP_CADDY`` names another.

One server named ``dash`` serves the media folder with Caddy's ``file_server``.
Over TLS (transports ``h2``, ``h3`` and ``race``) it speaks HTTP/1.1, HTTP/2 and HTTP/3
on one port (TCP and UDP) and advertises ``alt-svc: h3``; its certificate is
the run's leaf (:mod:`.certs`), loaded from files. The TLS policy sets
``default_sni`` to the server's address: clients send no SNI for an IP
address, and without it Caddy ends the handshake with an internal-error
alert. For ``tcp`` it serves plain HTTP/1.1. The admin endpoint is off
(nothing listens but the site), automatic HTTPS is off (no ACME, no
redirects), every 200 says ``Cache-Control: max-age=86400`` as
:mod:`.server` does (:mod:`~nest_experiments.dash.http.httpcache`: a browser's cache then does not depend
on the files' age), and the access log is JSON in ``access_log``
(:mod:`nest_experiments.parsers.caddy` reads it); Caddy's own log goes to
stderr. The configuration is data handed to ``caddy run --config FILE``:
never a shell string.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from nest_experiments.dash.http.httpcache import MEDIA_CACHE_CONTROL
from nest_experiments.errors import ConfigError, MissingToolError

PORT = 8443  # where our apps run it: TCP and, for h3, UDP
TRANSPORTS = ("tcp", "h2", "h3", "race")  # what Caddy serves here (Caddy 2.6 has no MPTCP listener); race as h3
LOGGER = "http.log.access.dash"


ENV_BINARY = "NEST_EXP_CADDY"  # path of another Caddy to run (e.g. Debian's /usr/bin/caddy, to compare)


def binary() -> str:
    """The Caddy to run: ``$NEST_EXP_CADDY``, else the venv's build (``native/caddy``), else the one on PATH."""
    chosen = os.environ.get(ENV_BINARY)
    if chosen:
        if not os.access(chosen, os.X_OK):
            raise MissingToolError(f"{ENV_BINARY}={chosen}: not an executable file; unset it to use the venv's Caddy")
        return chosen
    built = Path(sys.executable).parent / "caddy"
    if os.access(built, os.X_OK):
        return str(built)
    found = shutil.which("caddy")
    if found is None:
        raise MissingToolError("caddy not found: run ./setup.sh, which builds it from native/caddy with Go >= 1.26, "
                               "or install Debian's (apt-get install caddy)")
    return found


def host_port(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def config(*, root: Path, addr: str, port: int, transport: str, access_log: Path, storage: Path,
           chain: Path | None = None, key: Path | None = None) -> dict[str, Any]:
    """Caddy's JSON configuration serving ``root`` on ``addr:port`` for ``transport``."""
    if transport not in TRANSPORTS:
        raise ConfigError("", f"Caddy serves {TRANSPORTS}, not {transport!r}")
    tls = transport != "tcp"
    server: dict[str, Any] = {
        "listen": [host_port(addr, port)],
        "protocols": ["h1", "h2", "h3"] if tls else ["h1"],
        "routes": [{"handle": [
            {"handler": "headers", "response": {"set": {"Cache-Control": [MEDIA_CACHE_CONTROL]},
                                                "require": {"status_code": [200]}}},
            {"handler": "file_server", "root": str(root)},
        ]}],
        "logs": {"default_logger_name": "dash"},
        "automatic_https": {"disable": True},
    }
    apps: dict[str, Any] = {"http": {"servers": {"dash": server}}}
    if tls:
        if chain is None or key is None:
            raise ConfigError("", "a TLS transport needs the certificate chain and key")
        server["tls_connection_policies"] = [{"certificate_selection": {"any_tag": ["dash"]}, "default_sni": addr}]
        apps["tls"] = {"certificates": {"load_files": [{"certificate": str(chain), "key": str(key), "tags": ["dash"]}]}}
    return {
        "admin": {"disabled": True},
        "storage": {"module": "file_system", "root": str(storage)},
        "logging": {"logs": {
            "default": {"writer": {"output": "stderr"}, "exclude": [LOGGER]},
            "dash": {"writer": {"output": "file", "filename": str(access_log)}, "encoder": {"format": "json"},
                     "include": [LOGGER]},
        }},
        "apps": apps,
    }  # fmt: skip
