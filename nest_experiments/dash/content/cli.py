"""``media`` sub-command: ``python -m nest_experiments media generate|encode --ladder eldorado_av1``.

:func:`add_media_parser` plugs into the main CLI (it sets ``handler`` on the
parsed arguments); :func:`media_main` runs it on its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from nest_experiments.dash.content import encode, media
from nest_experiments.errors import ConfigError, NestExpError


def add_media_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``media generate`` and ``media list`` to ``subparsers``."""
    parser = subparsers.add_parser("media", help="generate DASH content from a bitrate ladder")
    sub = parser.add_subparsers(dest="media_command", required=True)
    gen = sub.add_parser("generate", help="write an MPD and segments (cached in media/cache/)")
    gen.add_argument("--ladder", required=True, help="ladder name in media/ladders/ or a TOML path")
    gen.add_argument("--duration", type=float, help="clip to this many seconds (default: the ladder's)")
    gen.add_argument("--vbr", type=float, default=0.0, help="log-normal sigma of segment sizes (default 0: CBR)")
    gen.add_argument("--seed", type=int, default=0, help="seed of the VBR variation")
    gen.add_argument("--out", type=Path, help="parent folder (default: media/cache)")
    gen.set_defaults(handler=media_generate)
    enc = sub.add_parser("encode", help="encode decodable DASH content with ffmpeg (cached in media/cache/)")
    enc.add_argument("--ladder", required=True, help="ladder name in media/ladders/ or a TOML path")
    enc.add_argument("--duration", type=float, help="clip to this many seconds (default: the ladder's)")
    enc.add_argument("--codec", default=encode.DEFAULT_CODEC, choices=encode.CODECS)
    enc.add_argument("--source", type=Path, help="a video file (default: a test pattern and a tone)")
    enc.add_argument("--max-height", type=int, default=encode.DEFAULT_MAX_HEIGHT, help="lines at most (default 360)")
    enc.add_argument("--out", type=Path, help="parent folder (default: media/cache)")
    enc.set_defaults(handler=media_encode)
    lst = sub.add_parser("list", help="list the shipped ladders")
    lst.set_defaults(handler=media_list)
    return parser


def media_generate(args: argparse.Namespace) -> int:
    """Handler of ``media generate``: print the MPD's path."""
    ladder = media.load_ladder(args.ladder)
    mpd = media.generate(ladder, args.out, duration_s=args.duration, vbr=args.vbr, seed=args.seed)
    print(mpd)
    return 0


def media_encode(args: argparse.Namespace) -> int:
    """Handler of ``media encode``: print the MPD's path."""
    ladder = media.load_ladder(args.ladder)
    print(encode.encode(ladder, args.out, duration_s=args.duration, codec=args.codec, source=args.source,
                        max_height=args.max_height))
    return 0


def media_list(args: argparse.Namespace) -> int:
    """Handler of ``media list``: one line per ladder."""
    for name in media.available_ladders():
        ladder = media.load_ladder(name)
        rates = [lv.bitrate_bps for lv in ladder.video.levels]
        print(
            f"{name}: {len(rates)} video levels {rates[0] // 1000}-{rates[-1] // 1000} kbit/s, "
            f"{ladder.segment_duration_s:g} s segments, {ladder.duration_s:g} s ({ladder.source})"
        )
    return 0


def media_main(argv: list[str] | None = None) -> int:
    """Run ``media ...`` on its own: errors become one line on stderr."""
    parser = argparse.ArgumentParser(prog="python -m nest_experiments")
    add_media_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["media", *(argv if argv is not None else sys.argv[1:])])
    try:
        return int(args.handler(args))
    except NestExpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
