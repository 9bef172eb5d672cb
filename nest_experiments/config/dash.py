"""App kind ``dash``: a DASH session (origin, player, transport, media, ABR, racing policy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nest_experiments.config import toollimits
from nest_experiments.config import topology as topo
from nest_experiments.config.core import (
    AppConfig,
    start_time,
    two_nodes,
)
from nest_experiments.config.tomlread import Table, as_str, join, one_of, positive_int
from nest_experiments.dash.core.abr.base import DEFAULT_ABR
from nest_experiments.errors import ConfigError
from nest_experiments.units import format_rate, parse_rate, parse_time

DASH_TRANSPORTS = ("tcp", "mptcp", "h2", "h3", "race")  # race: QUIC/TCP connection racing (alt-svc from Caddy)
MPTCP_ENDPOINT_MODES = ("fullmesh", "subflow")
# our asyncio server (aioquic for h3), Caddy (quic-go), webfsd (Debian's webfs: plain HTTP/1.1, the ABR letter's server
# over TCP)
DASH_HTTP_SERVERS = ("nest", "caddy", "webfs")
CADDY_TRANSPORTS = ("tcp", "h2", "h3", "race")  # Caddy 2.6 has no MPTCP listener
WEBFS_TRANSPORTS = ("tcp",)  # webfsd speaks HTTP/1.1 on a TCP socket (its TLS mode is not HTTP/2)
MEDIA_KINDS = ("generated", "encoded")  # dash.media (sizes only) or dash.encode (decodable, ffmpeg)
DASH_H3_CLIENTS = ("qh3", "aioquic", "quic-go")  # the player's QUIC stack (dash.transports.H3_CLIENTS); the first: default
IDLE_TIMEOUT_S = 30.0  # our player's default idle_timeout (dash.http.transports.FetcherOptions.idle_timeout)


@dataclass(frozen=True, kw_only=True)
class DashApp(AppConfig):
    """A DASH session: our server on ``server``, our player on ``client``, over ``transport``."""

    server: str
    client: str
    transport: str = "tcp"
    ladder: str = "eldorado_av1"
    clip_s: float | None = None  # None: the ladder's whole duration
    abr: str = DEFAULT_ABR
    abr_audio: str = DEFAULT_ABR
    level: int = 0  # abr = "fixed": the video level (0-based index into the ladder)
    max_buffer_s: float = 10.0
    threshold_s: float = 1.0
    vbr: float = 0.0
    mptcp_endpoints: str = "fullmesh"
    mptcp_subflows: int = 2
    # net.mptcp.add_addr_timeout on both ends; None: the kernel's (120 s; before Linux 6.18 a fixed timer)
    mptcp_add_addr_timeout_s: int | None = None
    http_server: str = "nest"  # the origin's software: "nest" (dash/origin/server.py), "caddy" or "webfs"; the file
    # may give one per transport (a table of transport -> name)
    h3_client: str = DASH_H3_CLIENTS[0]  # the player's QUIC stack over h3
    player: str = "nest"  # dash.players.PLAYERS: ours, dash.js in headless Chromium, GPAC
    media: str = "generated"  # "generated" (sizes only, dash.media) or "encoded" (decodable, dash.encode)
    codec: str = "h264"  # encoded media: dash.encode.CODECS
    source: str | None = None  # encoded media: a video file (None: a test pattern and a tone)
    racing: str = "chromium"  # transport "race", our player: the policy (dash.racing.POLICIES)
    racing_params: tuple[tuple[str, float], ...] = ()  # (dash.racing.RacingParams field, value) set in the file
    abandon: str = "none"  # slow media requests: "dashjs" = dash.js's AbandonRequestsRule (ours: dash.abandon)
    page: str = "none"  # before the MPD: "dashjs" = the dash.js page and script, as a browser loads the player
    initial_bitrate: str = "abr"  # the first segment's level: the ABR's, or "dashjs" (dash.js's initial bitrate)
    schedule: str = "buffer"  # "buffer": each stream to max_buffer; "dashjs": audio at most 1 s ahead of video
    fast_switch: str = "none"  # "dashjs": an up-switch replaces the buffered segment under the playhead onwards
    http_cache: str = "none"  # "browser": a request for a URL fetched before is answered from memory while fresh
    # our player: seconds a response may send no byte before the run fails (a dead server); None ("none" in the
    # file): it waits as long as the session lasts, as a browser's XHR without a timeout does
    idle_timeout_s: float | None = IDLE_TIMEOUT_S

    @property
    def kernel_features(self) -> tuple[str, ...]:
        return ("mptcp",) if self.transport == "mptcp" else ()



def parse_dash(t: Table, name: str, spec: topo.TopologySpec, duration: float) -> DashApp:
    from nest_experiments.dash import players  # pure modules; loaded only when a dash app is used
    from nest_experiments.dash.content import media  # pure modules; loaded only when a dash app is used
    from nest_experiments.dash.core.abr import registry as abr  # pure modules; loaded only when a dash app is used

    server, client = two_nodes(t, spec, "server", "client")
    ladder = t.get("ladder", one_of(tuple(media.available_ladders())), "eldorado_av1")
    clip = t.get("clip", lambda p, v: parse_time(p, v, allow_zero=False), None)
    length = media.load_ladder(ladder).duration_s
    if clip is not None and clip > length:
        raise ConfigError(join(t.path, "clip"), f"{clip:g} s is longer than ladder {ladder!r} ({length:g} s)")
    player_name = t.get("player", one_of(players.PLAYERS), "nest")
    algorithms = one_of(players.abr_names(player_name, tuple(abr.available_abrs())))
    video_abr = t.get("abr", algorithms, players.default_abr(player_name))
    max_buffer = t.get("max_buffer", lambda p, v: parse_time(p, v, allow_zero=False), 10.0)
    threshold = t.get("threshold", lambda p, v: parse_time(p, v, allow_zero=False), 1.0)
    if threshold > max_buffer:
        raise ConfigError(join(t.path, "threshold"), f"{threshold:g} s exceeds max_buffer ({max_buffer:g} s)")

    def add_addr_timeout(path: str, value: object) -> int:
        return int(toollimits.DASH["mptcp_add_addr_timeout"].check(path, parse_time(path, value, allow_zero=False)))

    def vbr(path: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 2:
            raise ConfigError(path, f"expected a log-normal sigma in [0, 2), got {value!r}")
        return float(value)

    transport = t.get("transport", one_of(DASH_TRANSPORTS), "tcp")
    player, media_kind, codec, source = _dash_player_and_media(t, transport, video_abr)
    http_server = t.get("http_server", _server_for(transport), "nest")
    if http_server == "webfs" and transport not in WEBFS_TRANSPORTS:
        raise ConfigError(join(t.path, "http_server"), f"webfsd serves plain HTTP/1.1 (transport 'tcp'), not "
                                                       f"{transport!r}: use 'caddy' or 'nest' for it")
    if http_server == "caddy" and transport not in CADDY_TRANSPORTS:
        raise ConfigError(join(t.path, "http_server"), f"Caddy serves transports {', '.join(CADDY_TRANSPORTS)}, "
                                                       f"not {transport!r}: use http_server = 'nest' for it")
    if players.KINDS[player].browser and transport == "race" and http_server != "caddy":
        raise ConfigError(join(t.path, "http_server"), "dash.js over race needs http_server = 'caddy' (its alt-svc "
                                                       "header is how the browser discovers QUIC)")
    return DashApp(
        name=name, kind="dash", server=server, client=client, start_s=start_time(t, duration),
        transport=transport, http_server=http_server, h3_client=t.get("h3_client", one_of(DASH_H3_CLIENTS), "qh3"),
        player=player, media=media_kind, codec=codec, source=source,
        ladder=ladder, clip_s=clip, abr=video_abr, abr_audio=_abr_audio(t, player, algorithms, video_abr),
        level=_fixed_level(t, video_abr, media.load_ladder(ladder)),
        max_buffer_s=max_buffer, threshold_s=threshold, vbr=t.get("vbr", vbr, 0.0),
        mptcp_endpoints=t.get("mptcp_endpoints", one_of(MPTCP_ENDPOINT_MODES), "fullmesh"),
        mptcp_subflows=t.get("mptcp_subflows", toollimits.integer(toollimits.DASH["mptcp_subflows"]), 2),
        mptcp_add_addr_timeout_s=t.get("mptcp_add_addr_timeout", add_addr_timeout, None),
        abandon=_abandon(t, player),
        page=_page(t, player),
        initial_bitrate=_initial_bitrate(t, player),
        schedule=_schedule(t, player),
        fast_switch=_fast_switch(t, player),
        http_cache=_http_cache(t, player, transport),
        idle_timeout_s=_idle_timeout(t, player),
        **_racing(t, transport, player),
    )


def _server_for(transport: str) -> Callable[[str, object], str]:
    """``http_server``: a name, or a table of transport -> name (a design whose servers differ by transport, as the
    ABR letter's webfsd over TCP and quic-go over QUIC): the one for ``transport``."""
    name = one_of(DASH_HTTP_SERVERS)

    def check(path: str, value: object) -> str:
        if not isinstance(value, dict):
            return str(name(path, value))
        unknown = sorted(set(value) - set(DASH_TRANSPORTS))
        if unknown:
            raise ConfigError(f"{path}.{unknown[0]}", f"not a transport; expected one of {', '.join(DASH_TRANSPORTS)}")
        if transport not in value:
            raise ConfigError(path, f"names no server for transport {transport!r}: add {transport} = \"...\"")
        return str(name(f"{path}.{transport}", value[transport]))

    return check


ABANDON_RULES = ("none", "dashjs")
PAGES = ("none", "dashjs")
INITIAL_BITRATES = ("abr", "dashjs")
SCHEDULES = ("buffer", "dashjs")  # dash.player.SCHEDULES (dash.js: ScheduleController)
FAST_SWITCHES = ("none", "dashjs")  # dash.js: StreamProcessor._prepareForFastQualitySwitch
HTTP_CACHES = ("none", "browser")  # dash.httpcache.MODES


def _abandon(t: Table, player: str) -> str:
    """``abandon`` of a dash app: how slow media requests are abandoned. Our player: ``"none"`` (the default)
    or ``"dashjs"`` (dash.js's AbandonRequestsRule and XHR timeout, dash.abandon); dash.js in a browser always
    runs its own (``"dashjs"``, the default there); GPAC has its own logic, not this key."""
    return _dashjs_behaviour(t, player, "abandon", ABANDON_RULES, "abandons by its AbandonRequestsRule")


def _idle_timeout(t: Table, player: str) -> float | None:
    """``idle_timeout`` of a dash app (our player): how long a response may send no byte before the player fails
    the run, a time (default 30 s) or ``"none"`` (it waits as long as the session lasts, as a browser's XHR without
    a timeout waits behind a deep queue). The other players have their own (dash.js's XHR, GPAC's)."""
    if not t.has("idle_timeout"):
        return IDLE_TIMEOUT_S
    if player != "nest":
        raise ConfigError(join(t.path, "idle_timeout"), f"applies to player = 'nest', not {player!r} (it has its "
                                                        "own request timeouts)")

    def seconds(p: str, value: object) -> float | None:
        return None if value == "none" else parse_time(p, value, allow_zero=False)

    return t.get("idle_timeout", seconds)


def _page(t: Table, player: str) -> str:
    """``page`` of a dash app: what comes before the MPD. Our player: ``"none"`` (the default: the MPD first)
    or ``"dashjs"`` (the dash.js page and ``dash.all.min.js`` first, from the same origin, as a browser loads
    the player; over ``race`` their responses teach alt-svc and start the QUIC job before the MPD)."""
    return _dashjs_behaviour(t, player, "page", PAGES, "loads its page and dash.all.min.js first")


def _initial_bitrate(t: Table, player: str) -> str:
    """``initial_bitrate`` of a dash app: each stream's first level. Our player: ``"abr"`` (the default: its ABR's choice)
    or ``"dashjs"`` (the level dash.js's initial bitrate affords: 1000 kbit/s video, 100 kbit/s audio)."""
    return _dashjs_behaviour(t, player, "initial_bitrate", INITIAL_BITRATES, "starts at its initial bitrate", default_nest="abr")


def _schedule(t: Table, player: str) -> str:
    """``schedule`` of a dash app: when a stream asks for more. Our player: ``"buffer"`` (the default: every
    stream up to max_buffer, as soon as its buffer allows) or ``"dashjs"`` (dash.js's ScheduleController: audio
    only while its buffer is below video's + 1 s, or one audio segment; video while its buffer + a segment is below
    max_buffer; each stream checks when its own segment arrives, then every 500 ms: :class:`dash.player.PlayerConfig`)."""
    return _dashjs_behaviour(t, player, "schedule", SCHEDULES, "keeps audio at most 1 s ahead of video",
                             default_nest="buffer")


def _fast_switch(t: Table, player: str) -> str:
    """``fast_switch`` of a dash app: what a level change does to the buffer. Our player: ``"none"`` (the default:
    the new level from the next segment on) or ``"dashjs"`` (dash.js's fast switch: when the segment under the
    playhead was downloaded at a lower bitrate than the new level's, it and the buffered ones after it are
    downloaded again at the new level)."""
    return _dashjs_behaviour(t, player, "fast_switch", FAST_SWITCHES, "switches fast (replaces buffered segments)")


def _http_cache(t: Table, player: str, transport: str) -> str:
    """``http_cache`` of a dash app: what a request for a URL fetched before does. Our player: ``"none"`` (the
    default: it goes to the network) or ``"browser"`` (answered from memory while the response is fresh by its
    cache-control max-age, as a browser's HTTP cache answers it: dash.httpcache); the browsers always have their
    own cache (``"browser"``)."""
    value = _dashjs_behaviour(t, player, "http_cache", HTTP_CACHES, "", browser="browser")
    if value == "browser" and player == "nest" and transport == "h3" and t.data.get("h3_client") == "quic-go":
        raise ConfigError(join(t.path, "http_cache"), "the quic-go client reports no response headers, so nothing "
                                                      "would be cached: use h3_client = 'qh3' or 'aioquic', or "
                                                      "http_cache = 'none'")
    return value


def _dashjs_behaviour(t: Table, player: str, key: str, values: tuple[str, ...], what: str, *,
                      default_nest: str = "none", browser: str = "dashjs") -> str:
    """A key that gives our player one of the browser players' behaviours: ``default_nest`` or ``browser`` for it,
    always ``browser`` for the browser players (dash.js's, or the browser's own), not for GPAC."""
    from nest_experiments.dash import players

    if players.KINDS[player].browser:
        if t.get(key, one_of(values), browser) != browser:
            does = f"runs dash.js, which {what}" if what else "has its own HTTP cache"
            raise ConfigError(join(t.path, key), f"player {player!r} {does}: {browser!r} (or leave it out)")
        return browser
    if player != "nest":
        if t.has(key):
            raise ConfigError(join(t.path, key), f"applies to player = 'nest' and the dash.js players, not "
                                                 f"{player!r}")
        return default_nest
    return t.get(key, one_of(values), default_nest)


def _racing(t: Table, transport: str, player: str) -> dict[str, Any]:
    """``racing`` and ``racing_params`` of a dash app: our player over ``race`` only.

    ``racing_params`` keys are :class:`nest_experiments.dash.core.racing.RacingParams` fields; a time
    (``idle_timeout = "29s"``) drops the field's ``_s``, counts and ratios are numbers.
    """
    from nest_experiments.dash import players
    from nest_experiments.dash.core import racing

    own = players.KINDS[player].own_racing
    if own is not None and transport == "race" and t.data.get("racing") == own and not t.has("racing_params"):
        t.get("racing", one_of(racing.POLICIES), own)  # the browser's own racing, named (a player sweep pairs by it)
        return {"racing": own, "racing_params": ()}
    for key in ("racing", "racing_params"):
        if t.has(key) and (transport != "race" or player != "nest"):
            hint = f" (a browser over race takes racing = {own!r} only: its own)" if own and key == "racing" else ""
            raise ConfigError(join(t.path, key), "applies to our player (player = 'nest') over transport = 'race' "
                                                 f"only: remove it or set transport = 'race'{hint}")
    if transport == "race" and player == "nest" and t.data.get("h3_client") == "quic-go":
        raise ConfigError(join(t.path, "h3_client"), "the race transport runs QUIC in the player's process: "
                                                     "h3_client = 'qh3' or 'aioquic', not 'quic-go'")
    policy = t.get("racing", one_of(racing.POLICIES), "chromium")
    p = t.table("racing_params")
    values: dict[str, float] = {}
    for name in racing.PARAM_NAMES:
        if name in racing.INT_PARAMS:
            values[name] = p.get(name, positive_int, None)
        elif name.endswith("_s"):
            values[name] = p.get(name[:-2], parse_time, None)
        else:
            values[name] = p.get(name, _positive_number, None)
    p.done()
    chosen = {k: v for k, v in values.items() if v is not None}
    try:
        racing.params_from(chosen)
    except ConfigError as exc:  # its message: 'KEY: why'
        key, _, why = str(exc).partition(": ")
        raise ConfigError(join(p.path, key.removesuffix("_s")), why) from None
    return {"racing": policy, "racing_params": tuple(sorted(chosen.items()))}


def _positive_number(path: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(path, f"expected a number > 0, got {value!r}")
    return float(value)


def _dash_player_and_media(t: Table, transport: str, video_abr: str) -> tuple[str, str, str, str | None]:
    """``player``, ``media``, ``codec``, ``source`` of a dash app (whether this machine has the player: the
    preflight's check, config.kinds)."""
    from nest_experiments.dash import players
    from nest_experiments.dash.content import encode

    player = t.get("player", one_of(players.PLAYERS), "nest")
    kind_of = players.KINDS[player]
    if transport not in kind_of.transports:
        raise ConfigError(join(t.path, "transport"), f"player {player!r} plays over "
                                                     f"{', '.join(kind_of.transports)}, not {transport!r}")
    decodes = kind_of.decodes
    kind = t.get("media", one_of(MEDIA_KINDS), "encoded" if decodes else "generated")
    if decodes and kind != "encoded":
        raise ConfigError(join(t.path, "media"), f"player {player!r} decodes: it needs media = 'encoded'")
    if kind == "generated":
        for key in ("codec", "source"):
            if t.has(key):
                raise ConfigError(join(t.path, key), "applies to media = 'encoded' only")
    elif t.has("vbr"):
        raise ConfigError(join(t.path, "vbr"), "applies to media = 'generated' only (encodes are CBR)")
    codec = t.get("codec", one_of(encode.CODECS), encode.DEFAULT_CODEC)
    if codec in kind_of.refuses_codecs:
        raise ConfigError(join(t.path, "codec"), kind_of.refuses_codecs[codec])
    source = t.get("source", as_str, None)
    if source is not None and not Path(source).is_file():
        raise ConfigError(join(t.path, "source"), f"{source}: no such video file (a path relative to the "
                                                  "experiment file, or absolute)")
    if player == "gpac" and t.get("threshold", lambda p, v: parse_time(p, v, allow_zero=False), 1.0) >= \
            t.get("max_buffer", lambda p, v: parse_time(p, v, allow_zero=False), 10.0):
        raise ConfigError(join(t.path, "threshold"), "GPAC rebuffers only with a threshold below max_buffer")
    return player, kind, codec, source


def _fixed_level(t: Table, video_abr: str, ladder: Any) -> int:
    """``level`` of ``abr = "fixed"``: an index into the video ladder, or one of its bitrates (``"1600kbit"``,
    so that one sweep axis can set the level and a link's rate together)."""
    rates = [lv.bitrate_bps for lv in ladder.video.levels]
    listed = ", ".join(format_rate(r) for r in rates)

    def conv(path: str, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(rates):
                raise ConfigError(path, f"level {value} is not in ladder {ladder.name!r}: 0..{len(rates) - 1}")
            return value
        bps = parse_rate(path, value)
        if bps not in rates:
            raise ConfigError(path, f"{value!r} is not a video bitrate of ladder {ladder.name!r} ({listed}): "
                                    "give one of them or a level index")
        return rates.index(bps)

    if video_abr != "fixed":
        if t.has("level"):
            raise ConfigError(join(t.path, "level"), "applies to abr = 'fixed' only")
        return 0
    return t.get("level", conv, 0)


def _abr_audio(t: Table, player: str, algorithms: Callable[[str, object], str], video_abr: str) -> str:
    from nest_experiments.dash import players

    if not players.KINDS[player].own_audio_abr and t.has("abr_audio"):
        raise ConfigError(join(t.path, "abr_audio"), f"player {player!r} adapts audio with its own rules: "
                                                     "remove abr_audio")
    return t.get("abr_audio", algorithms, video_abr)


