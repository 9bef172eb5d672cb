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

Each is one :class:`Player` record in :data:`KINDS` (its process, transports,
ABRs, refused codecs, own racing, doctor line, machine check, Debian
packages); the config, the DASH app, ``doctor`` and ``setup.sh`` (``python -m
nest_experiments.dash.players --apt``) read the records, so a new player is
its record and its own module. :func:`missing` says why a player cannot run
here (None when it can); the config refuses such a player before anything is
created, and ``doctor`` prints the same text.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nest_experiments import resources
from nest_experiments.dash.content import encode
from nest_experiments.dash.core.abr.base import DEFAULT_ABR
from nest_experiments.dash.players.gpac import GPAC_ALGOS, GPAC_HINT

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

#: dash.js's own ABR rules by the names an experiment gives (``abr``); the first three are the twins of ours
# "dashjs": dash.js's defaults, i.e. "dynamic" with the InsufficientBufferRule and SwitchHistoryRule beside it,
# as it runs in the browser anyway; the name of our port of that chain (abr.DashJs), so one sweep pairs them
DASHJS_ABRS = ("throughput", "bola", "dynamic", "dashjs", "l2a", "lolp")
#: our ABR name -> GPAC's ``algo`` where they are the same algorithm (abr.GpacRate, abr.Bba)
GPAC_TWINS = {"grate": "grate", "bba": "bba0"}


@dataclass(frozen=True, kw_only=True)
class Player:
    """One DASH player, declared once: what it is, the process that runs it, what it supports and what it needs of
    this machine. A new player is one record in :data:`KINDS` and its own module (the process ``module`` names)."""

    name: str
    module: str  # the player's process (``python -m``), started in the client's namespace
    transports: tuple[str, ...]
    describe: Callable[[], str]  # what doctor prints when it can run here
    needs: Callable[[str], str | None]  # why it cannot run here over a transport (with how to fix it), or None
    decodes: bool = True  # it needs encoded (decodable) media
    browser: bool = False  # dash.js on our page in a browser
    abrs: tuple[str, ...] | None = None  # the ``abr`` values it accepts; None: our registered algorithms
    default_abr: str = DEFAULT_ABR
    own_audio_abr: bool = False  # it takes ``abr_audio`` (the others adapt audio with their own rules)
    refuses_codecs: Mapping[str, str] = field(default_factory=dict)  # codec -> why its decoder cannot play it
    reads_cert_at_start: bool = False  # it reads the server's certificate as it starts: the server comes first
    own_racing: str | None = None  # a browser's own QUIC/TCP racing over ``race``, as a racing policy's name
    # how the DASH app starts it: "ours" (our Python player, worth a warm interpreter: its imports are all its start),
    # "browser" (dash.js on our page in the browser ``module`` drives), "gpac" (GPAC's client, driven by ``module``)
    launch: Literal["ours", "browser", "gpac"] = "browser"
    apt: tuple[str, ...] = ()  # the Debian packages it needs (setup.sh installs them: python -m ...players --apt)

    def abr_names(self, ours: tuple[str, ...]) -> tuple[str, ...]:
        """The ``abr`` values it accepts (``ours``: our registered algorithms)."""
        return ours if self.abrs is None else self.abrs


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


def _needs_chromium(transport: str) -> str | None:
    if chromium_path() is None:
        return CHROMIUM_HINT
    return DASHJS_HINT if dashjs_file() is None else None


def _needs_firefox(transport: str) -> str | None:
    if firefox_path() is None:
        return FIREFOX_HINT
    if transport != "tcp" and shutil.which("certutil") is None:
        return CERTUTIL_HINT
    return DASHJS_HINT if dashjs_file() is None else None


def _needs_gpac(transport: str) -> str | None:
    if shutil.which("gpac") is None:
        return GPAC_HINT
    if transport == "mptcp" and shutil.which("mptcpize") is None:
        return MPTCPIZE_HINT
    return None


KINDS: dict[str, Player] = {k.name: k for k in (
    Player(name="nest", module="nest_experiments.dash.players.client", launch="ours", decodes=False, own_audio_abr=True,
           transports=("tcp", "mptcp", "h2", "h3", "race"), describe=lambda: "ours (headless, counts bytes)",
           needs=lambda transport: None),
    Player(name="dashjs", module="nest_experiments.dash.players.browser", browser=True, abrs=DASHJS_ABRS,
           default_abr="dynamic", transports=("tcp", "h2", "h3", "race"), refuses_codecs=encode.NOT_IN_CHROMIUM,
           reads_cert_at_start=True, own_racing="chromium", apt=("chromium",), needs=_needs_chromium,
           describe=lambda: f"dash.js {DASHJS_VERSION} in headless {chromium_path()}"),
    Player(name="firefox", module="nest_experiments.dash.players.firefoxplayer", browser=True, abrs=DASHJS_ABRS,
           default_abr="dynamic", transports=("tcp", "h2", "h3", "race"), own_racing="firefox",
           apt=("firefox-esr", "libnss3-tools"),
           needs=_needs_firefox, describe=lambda: f"dash.js {DASHJS_VERSION} in headless {firefox_path()}"),
    # GPAC over h2/h3 needs a build with nghttp2/ngtcp2 (untested here: no GPAC on Debian 12); its packages come
    # from bullseye (setup.sh's install_gpac), not from this list
    Player(name="gpac", module="nest_experiments.dash.players.gpacplayer", launch="gpac",
           abrs=(*GPAC_TWINS, *(a for a in GPAC_ALGOS if a not in GPAC_TWINS)), reads_cert_at_start=True,
           transports=("tcp", "mptcp", "h2", "h3"), apt=("mptcpize",), needs=_needs_gpac,
           describe=lambda: "GPAC's DASH client"),
)}
# views of the records, for the code that asks one question of all players
PLAYERS = tuple(KINDS)
DECODING = tuple(k.name for k in KINDS.values() if k.decodes)  # players that need encoded (decodable) media
BROWSERS = tuple(k.name for k in KINDS.values() if k.browser)  # dash.js on our page in a browser: Chromium, Firefox
TRANSPORTS = {k.name: k.transports for k in KINDS.values()}


def report() -> list[tuple[str, str | None]]:
    """(player, why it cannot run here or None) for every player: what ``doctor`` prints."""
    return [(name, missing(name)) for name in PLAYERS]


def missing(player: str, transport: str = "tcp") -> str | None:
    """Why ``player`` cannot run on this machine over ``transport`` (with how to fix it), or None."""
    return KINDS[player].needs(transport)


def apt_packages() -> tuple[str, ...]:
    """The Debian packages the players need (setup.sh installs them; GPAC's come from bullseye, apart)."""
    return tuple(dict.fromkeys(p for k in KINDS.values() for p in k.apt))


def abr_names(player: str, ours: tuple[str, ...]) -> tuple[str, ...]:
    """The ``abr`` values a player accepts (``ours``: our registered algorithms)."""
    return KINDS[player].abr_names(ours)


def default_abr(player: str) -> str:
    return KINDS[player].default_abr


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
