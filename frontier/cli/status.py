"""What the frontier instances report on ``crawl.frontier.status``: ``crawl-frontier status``
(totals and the busiest scopes, or one crawl's counts) and ``crawl-frontier crawls`` (every
crawl; ``--wait NAME`` blocks until one is finished)."""

from __future__ import annotations

import argparse
import sys
import time

from frontier.cli.common import Subcommands, add_command, crawl_name, open_client


def cmd_status(args: argparse.Namespace) -> int:
    from frontier.client.crawls import render_crawls
    from frontier.client.status import LIVE_SECONDS, render

    client = open_client(args)
    while True:
        statuses = client.statuses(None if args.all else LIVE_SECONDS)
        if args.watch:
            print("\x1b[2J\x1b[H", end="")
        print(render_crawls(statuses, only=args.crawl) if args.crawl else render(statuses, args.top), flush=True)
        if not args.watch:
            return 0 if statuses else 1
        try:
            time.sleep(args.interval)
        except KeyboardInterrupt:
            return 0


def cmd_crawls(args: argparse.Namespace) -> int:
    from frontier.client.crawls import render_crawls
    from frontier.client.status import LIVE_SECONDS

    client = open_client(args)
    if args.wait:
        print(f"waiting for crawl {args.wait!r} to finish (at most {args.timeout:.0f} s)", file=sys.stderr)
        result = client.wait_done(args.wait, args.timeout, window=args.window)
        if result.done:
            print(f"crawl {args.wait!r} is done")
            return 0
        print(f"crawl {args.wait!r} is not done after {args.timeout:.0f} s: {result.left}")
        return 1
    print(render_crawls(client.statuses(LIVE_SECONDS)), flush=True)
    return 0


def register(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    st = add_command(sub, common, "status", "totals and the busiest scopes, from every live frontier instance")
    st.add_argument("--top", type=int, default=20)
    st.add_argument("--watch", action="store_true", help="refresh until interrupted")
    st.add_argument("--interval", type=float, default=2.0)
    st.add_argument("--all", action="store_true", help="include snapshots of instances that went silent")
    st.add_argument("--crawl", type=crawl_name, default=None, help="one crawl's counts (see `crawls`)")
    st.set_defaults(func=cmd_status)

    cs = add_command(sub, common, "crawls", "every crawl: queued, in flight, done, errors, pages/s, workers")
    cs.add_argument("--wait", type=crawl_name, default=None, metavar="NAME",
                    help="block until crawl NAME is finished (exit 0), or say what is left (exit 1)")  # fmt: skip
    cs.add_argument("--timeout", type=float, default=600.0, help="--wait: seconds at most")
    cs.add_argument("--window", type=float, default=0.0,
                    help="--wait: a revisit due within this many seconds counts as work left")  # fmt: skip
    cs.set_defaults(func=cmd_crawls)
