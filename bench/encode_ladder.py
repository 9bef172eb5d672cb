"""Encoded media: each level's mean bitrate against the ladder's, and the encode time on this machine.

    .venv/bin/python bench/encode_ladder.py [--ladder abr_quic_tcp] [--clip 60] [--codec h264]
                                            [--source VIDEO] [--max-height 360]

Encodes into a temporary folder (not the cache), with the settings of
``nest_experiments.dash.content.encode`` (every ffmpeg under ``nice -n 19``), and
prints one line per level: ladder rate, measured mean rate (media segment
bytes over the clip), their ratio, whether it is within 10 %, and the wall
seconds of that level's ffmpeg; then the packaging time and the total. Exit
status 1 when a level is outside the tolerance.

The NeST paper's AV1 ladder (15 levels, 145 kbit/s - 27.5 Mbit/s):
``--ladder eldorado_av1 --codec av1 --clip 8`` (SVT-AV1, about 30 s here).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from nest_experiments.dash.content import encode, media


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ladder", default="abr_quic_tcp")
    p.add_argument("--clip", type=float, default=60.0, help="seconds of media (default 60)")
    p.add_argument("--codec", default=encode.DEFAULT_CODEC, choices=encode.CODECS)
    p.add_argument("--source", type=Path, help="a video file (default: the test pattern)")
    p.add_argument("--max-height", type=int, default=encode.DEFAULT_MAX_HEIGHT)
    args = p.parse_args()
    ladder = media.load_ladder(args.ladder)
    with tempfile.TemporaryDirectory(prefix="encode-bench-") as tmp:
        start = time.monotonic()
        mpd = encode.encode(ladder, Path(tmp), duration_s=min(args.clip, ladder.duration_s), codec=args.codec,
                            source=args.source, max_height=args.max_height)
        total = time.monotonic() - start
        info = encode.encode_info(mpd)
        sizes = {f"{'a' if s == 'audio' else 'v'}{i}": encode.level_size(lv, args.max_height)
                 for s, track in (("audio", ladder.audio), ("video", ladder.video)) for i, lv in enumerate(track.levels)}
    print(f"{ladder.name}: {min(args.clip, ladder.duration_s):g} s, {args.codec}, source {info['source']}, "
          f"max height {args.max_height}")
    print(f"{'stream':<6} {'lvl':>3} {'size':>9} {'ladder kb/s':>11} {'measured':>9} {'ratio':>6} {'ok':>3} "
          f"{'encode s':>8}")
    bad = 0
    for row in info["levels"]:  # type: ignore[union-attr]
        key = f"{'a' if row['stream'] == 'audio' else 'v'}{row['level']}"
        size = "-" if row["stream"] == "audio" else "x".join(map(str, sizes[key]))
        bad += not row["within_tolerance"]
        print(f"{row['stream']:<6} {row['level']:>3} {size:>9} {row['ladder_bps'] / 1000:>11.0f} "
              f"{row['measured_bps'] / 1000:>9.0f} {row['ratio']:>6.3f} {'yes' if row['within_tolerance'] else 'NO':>3} "
              f"{row['encode_s']:>8.2f}")
    print(f"packaging {info['package_s']:.2f} s; total {total:.1f} s wall")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
