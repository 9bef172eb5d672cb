"""An h2 client for the access-log test: rounds of concurrent GETs on one connection, idle between rounds.

    python tests/integration/h2_rounds.py --port N --ca FILE --t0 T --pause S PATH[,PATH...]...

Each argument is a round: its PATHs are fetched at once (one stream each), one JSON line
per response (the fetcher's times on the ``--t0`` clock), then leaves the
connection open and idle for ``--pause`` seconds, as a player with a full
buffer does. The connection closes after the last pause.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from nest_experiments.dash.http.transports import open_fetcher, result_row


async def rounds(args: argparse.Namespace) -> None:
    t0 = args.t0
    fetcher = await open_fetcher("h2", "127.0.0.1", args.port, clock=lambda: time.monotonic() - t0, ca=args.ca)
    try:
        for paths in args.rounds:
            results = await asyncio.gather(*(fetcher.fetch(path, path) for path in paths.split(",")))
            for result in results:
                print(json.dumps(result_row(result)), flush=True)
            await asyncio.sleep(args.pause)
    finally:
        await fetcher.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca", type=Path, required=True)
    p.add_argument("--t0", type=float, required=True)
    p.add_argument("--pause", type=float, default=0.3)
    p.add_argument("rounds", nargs="+", metavar="PATH[,PATH...]")
    asyncio.run(rounds(p.parse_args()))


if __name__ == "__main__":
    main()
