"""Steering on ``crawl.control``: ``crawl-frontier crawl`` (pause, resume, drop or limit one
crawl, on every partition) and ``crawl-frontier scope`` (pause, resume, drop a scope, or set and
clear its delay and concurrency, on the partitions that may hold it)."""

from __future__ import annotations

import argparse
import sys

from frontier.cli.common import Subcommands, add_command, crawl_name, open_client
from topics.schemas import ControlCommand


def _send(args: argparse.Namespace, cmd: ControlCommand, sent: str) -> int:
    """Validate ``cmd`` (one line and status 2 when it is refused), send it, say ``sent``."""
    try:
        cmd.validate()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with open_client(args) as client:
        client.control(cmd)
    print(f"sent: {sent}")
    return 0


def cmd_crawl(args: argparse.Namespace) -> int:
    per_host = args.per_host if args.action == "limit" else None
    if args.action == "limit" and per_host is None:
        print("error: limit needs --per-host N (0 removes the limit)", file=sys.stderr)
        return 2
    cmd = ControlCommand(action=args.action, crawl=args.name, forget=args.forget, per_host=per_host)
    return _send(args, cmd, f"{args.action} crawl {args.name!r} to every partition (see `crawl-frontier crawls`)")


def cmd_scope(args: argparse.Namespace) -> int:
    cmd = ControlCommand(action=args.action, scope=args.name.strip().lower(), delay=args.delay,
                         concurrency=args.concurrency)  # fmt: skip
    return _send(
        args, cmd, f"{args.action} {cmd.scope} (applied by the instance owning it; see `crawl-frontier status`)"
    )


def register(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    cr = add_command(sub, common, "crawl", "pause/resume/drop one crawl, or limit the URLs it queues per host")
    cr.add_argument("action", choices=["pause", "resume", "drop", "limit"])
    cr.add_argument("name", type=crawl_name, help="the crawl")
    cr.add_argument("--forget", action="store_true", help="drop: forget its seen URLs too (crawled again if submitted)")
    cr.add_argument("--per-host", type=int, default=None, help="limit: URLs queued per host at most (0: no limit)")
    cr.set_defaults(func=cmd_crawl)

    sc = add_command(sub, common, "scope", "pause/resume/drop a scope, or set/clear its delay and concurrency")
    sc.add_argument("action", choices=["pause", "resume", "drop", "set", "clear"])
    sc.add_argument("name", help="a host, a registrable domain (all its hosts) or domain#scope")
    sc.add_argument("--delay", type=float, default=None, help="set: seconds between requests")
    sc.add_argument("--concurrency", type=int, default=None, help="set: requests in flight at once")
    sc.set_defaults(func=cmd_scope)
