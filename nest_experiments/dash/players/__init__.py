"""The DASH players a ``dash`` app can run, what each needs on this machine, and how to get it.

- ``nest``: our headless player (:mod:`.client`): it counts bytes and does
  not decode; it plays generated and encoded media, over tcp, mptcp, h2, h3,
  and race (QUIC/TCP connection racing by a policy of :mod:`~nest_experiments.dash.core.racing`).
- ``dashjs``: dash.js (npm ``dashjs``, pinned in ``web/package.json``) in
  Debian's headless ``chromium`` (:mod:`.browser`): it decodes, so it needs
  encoded media; tcp (HTTP/1.1), h2, h3, and race (Chromium's own QUIC/TCP
  connection racing, QUIC discovered from Caddy's alt-svc).
- ``firefox``: the same page and dash.js in Debian's headless ``firefox-esr``
  (:mod:`.firefoxplayer`, driven over Marionette on the namespace's
  loopback): tcp, h2, h3, and race (Firefox's own racing, QUIC discovered from
  Caddy's alt-svc); it needs ``certutil`` (libnss3-tools) for the run's CA.
- ``gpac``: GPAC's DASH client (``gpac -i URL:gpac:algo=...``, :mod:`.gpac`)
  with SDL's dummy audio/video output (:mod:`.gpacplayer`): it decodes too;
  tcp (HTTP/1.1), mptcp (through ``mptcpize``), and h2/h3 where the GPAC
  build has them. Debian 12 has no ``gpac`` package: ``setup.sh`` installs
  bullseye's 1.0.1 (:data:`.gpac.GPAC_HINT`).

:func:`missing` says why a player cannot run here (None when it can); the
config refuses such a player before anything is created, and ``doctor``
prints the same text.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from nest_experiments import resources
from nest_experiments.dash.core.abr.base import DEFAULT_ABR
from nest_experiments.dash.players.gpac import GPAC_ALGOS, GPAC_HINT

PLAYERS = ("nest", "dashjs", "firefox", "gpac")
DECODING = ("dashjs", "firefox", "gpac")  # players that need encoded (decodable) media
BROWSERS = ("dashjs", "firefox")  # dash.js on our page in a browser: Chromium, Firefox
# GPAC over h2/h3 needs a build with nghttp2/ngtcp2 (untested here: no GPAC on Debian)
TRANSPORTS = {"nest": ("tcp", "mptcp", "h2", "h3", "race"), "dashjs": ("tcp", "h2", "h3", "race"),
              "firefox": ("tcp", "h2", "h3", "race"), "gpac": ("tcp", "mptcp", "h2", "h3")}
DASHJS_VERSION = "5.2.1"
DASHJS_DIR = resources.data(resources.DASHJS_PACKAGE)
DASHJS_FILE = resources.data(resources.DASHJS_SCRIPT)
CHROMIUM = ("chromium", "chromium-browser")
CHROMIUM_HINT = "chromium is not installed: apt-get install chromium (sudo ./setup.sh installs it)"
FIREFOX = ("firefox-esr", "firefox")
FIREFOX_HINT = "firefox-esr is not installed: apt-get install firefox-esr"
CERTUTIL_HINT = "certutil is not installed (it adds the run's CA to Firefox's profile): apt-get install libnss3-tools"
DASHJS_HINT = (f"dash.js {DASHJS_VERSION} is not in this installed package (its wheel was built from a clone without "
               "it): in the clone run sudo ./setup.sh (npm ci in web/), then build and install the wheel again"
               if resources.installed() else
               f"dash.js {DASHJS_VERSION} is not installed in {DASHJS_DIR.parent}: sudo ./setup.sh (it runs npm ci in web/)")
MPTCPIZE_HINT = "mptcpize is not installed: apt-get install mptcpize (sudo ./setup.sh installs it)"


def report() -> list[tuple[str, str | None]]:
    """(player, why it cannot run here or None) for every player: what ``doctor`` prints."""
    return [(name, missing(name)) for name in PLAYERS]


def chromium_path() -> str | None:
    """The Chromium executable, or None."""
    for name in CHROMIUM:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def firefox_path() -> str | None:
    """The Firefox executable (ESR first), or None."""
    for name in FIREFOX:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def dashjs_file() -> Path | None:
    """dash.js's ``dash.all.min.js`` of the pinned version, or None."""
    return DASHJS_FILE if DASHJS_FILE.is_file() and _dashjs_version() == DASHJS_VERSION else None


def _dashjs_version() -> str:
    import json

    try:
        return str(json.loads((DASHJS_DIR / "package.json").read_text()).get("version", ""))
    except (OSError, ValueError):
        return ""


def missing(player: str, transport: str = "tcp") -> str | None:
    """Why ``player`` cannot run on this machine over ``transport`` (with how to fix it), or None."""
    if player == "dashjs":
        if chromium_path() is None:
            return CHROMIUM_HINT
        return DASHJS_HINT if dashjs_file() is None else None
    if player == "firefox":
        if firefox_path() is None:
            return FIREFOX_HINT
        if transport != "tcp" and shutil.which("certutil") is None:
            return CERTUTIL_HINT
        return DASHJS_HINT if dashjs_file() is None else None
    if player == "gpac":
        if shutil.which("gpac") is None:
            return GPAC_HINT
        if transport == "mptcp" and shutil.which("mptcpize") is None:
            return MPTCPIZE_HINT
    return None


#: dash.js's own ABR rules by the names an experiment gives (``abr``); the first three are the twins of ours
# "dashjs": dash.js's defaults, i.e. "dynamic" with the InsufficientBufferRule and SwitchHistoryRule beside it,
# as it runs in the browser anyway; the name of our port of that chain (abr.DashJs), so one sweep pairs them
DASHJS_ABRS = ("throughput", "bola", "dynamic", "dashjs", "l2a", "lolp")
#: our ABR name -> GPAC's ``algo`` where they are the same algorithm (abr.GpacRate, abr.Bba)
GPAC_TWINS = {"grate": "grate", "bba": "bba0"}


def abr_names(player: str, ours: tuple[str, ...]) -> tuple[str, ...]:
    """The ``abr`` values a player accepts (``ours``: our registered algorithms)."""
    if player in BROWSERS:
        return DASHJS_ABRS
    if player == "gpac":
        return (*GPAC_TWINS, *(a for a in GPAC_ALGOS if a not in GPAC_TWINS))
    return ours


def default_abr(player: str) -> str:
    return "dynamic" if player in BROWSERS else DEFAULT_ABR


def gpac_algo(abr: str) -> str:
    """GPAC's ``algo`` for an experiment's ``abr`` (our twin's name, or GPAC's own)."""
    return GPAC_TWINS.get(abr, abr)


PAGE_SOURCE = resources.data(resources.DASHJS_PAGE)
PAGE_NAME = "nest_dashjs.html"  # the player page, in the media folder beside the MPD


def install_dashjs_page(folder: Path) -> str:
    """Put the player page and the pinned ``dash.all.min.js`` into a media folder; return the page's URL path.

    Idempotent (files are replaced by a rename when they differ), so that any
    origin serving the folder serves the page: no CDN, nothing fetched from outside.
    """
    import os
    import tempfile

    script = dashjs_file()
    if script is None:
        from nest_experiments.errors import MissingToolError

        raise MissingToolError(DASHJS_HINT)
    for src, name in ((PAGE_SOURCE, PAGE_NAME), (script, script.name)):
        data, dest = src.read_bytes(), folder / name
        if dest.is_file() and dest.read_bytes() == data:
            continue
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    return f"/{PAGE_NAME}"
