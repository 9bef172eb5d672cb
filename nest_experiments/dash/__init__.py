"""The DASH stack, in five sub-packages that import one way (content <- core <- http <- origin, players):
``content/`` is the media itself: bitrate ladders and generated or ffmpeg-encoded media (``media``, ``encode`` and
the ``media`` sub-command, ``cli``), the MPD (``mpd``) and MP4 boxes (``mp4``), pure but for ffmpeg;
``core/`` is the sans-I/O player core: :class:`~.core.player.PlayerSession` (it reads no clock) and its asyncio
driver, the player's events (``events``), the ABR algorithms (``abr/``: one module each and a registry), dash.js's
abandon rule, the racing policies as state machines (``racing``), QoE (``qoe``), the rows the players write
(``records``, ``racing_log``) and the one fetch seam the transports implement (``fetch``); ``http/`` holds the
HTTP clients behind that seam: HTTP/1.1 heads (``http1``), the transports tcp/mptcp/h2/h3 (``transports``), h3
through quic-go (``quicgo``), QUIC/TCP racing's I/O side (``race``) and a browser's HTTP cache (``httpcache``);
``origin/`` serves the media: our server (``server``), Caddy's configuration (``caddy``) and the run's TLS
certificates (``certs``); ``players/`` holds the four players a ``dash`` app can run, each a process taking one
command line (``playerargs``): ours (``client``), dash.js in Chromium (``browser``, with ``dashjs`` and
``netlog`` turning its events and NetLog into rows), dash.js in Firefox (``firefoxplayer``) and GPAC
(``gpacplayer``, with ``gpac``: its command line and log parser); the package's ``__init__`` is their registry
(what each supports and needs, how to get it). ``dash`` imports nothing of net, vm, apps, collectors, runs,
analysis, studies or training (``tests/unit/test_import_rules.py``); the learned ABR's trainer is
``nest_experiments.training``."""
