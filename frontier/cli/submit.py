"""What goes in and what comes out: ``crawl-frontier submit`` and ``forget`` (URLs or JSON
submissions, from arguments or a file, through :meth:`FrontierClient.submit_lines`) and
``crawl-frontier pages`` (fetched pages as JSON lines, or as WARC files with ``--warc DIR``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Generator, Iterable, Iterator
from contextlib import closing
from pathlib import Path

from frontier.cli.common import Subcommands, add_command, crawl_name, load_config, open_client, still_reachable
from frontier.client import SubmitError, read_lines
from frontier.core import revisit
from topics.kafka import KafkaUnreachable
from topics.schemas import Page


def _revisit(text: str) -> float | str | list[float]:
    """``--revisit``: seconds, ``adaptive`` or ``MIN:MAX`` seconds (a clear error otherwise)."""
    try:
        return revisit.spec_of(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}" if "revisit" in str(exc) else
                                         f"{text!r}: seconds, 'adaptive' or MIN:MAX seconds") from None  # fmt: skip


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value!r}")
    return n


def _read_urls(args: argparse.Namespace) -> Iterator[bytes]:
    for url in args.urls:
        yield url.encode()
    if args.file:
        fh = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
        with fh:
            yield from read_lines(fh)


def _progress(lines: Iterable[bytes]) -> Iterator[bytes]:
    """``lines``, with a progress line on stderr every 2 s or so on large files."""
    count = 0
    started = shown = time.monotonic()
    for line in lines:
        yield line
        count += 1
        if count % 1000 == 0 and time.monotonic() - shown >= 2.0:
            shown = time.monotonic()
            print(f"  {count} submitted ({count / (shown - started):.0f}/s)", file=sys.stderr, flush=True)


def cmd_forget(args: argparse.Namespace) -> int:
    return cmd_submit(args, forget=True)


def cmd_submit(args: argparse.Namespace, forget: bool = False) -> int:
    if not args.urls and not args.file:
        load_config(args)  # a configuration error comes first, as before
        print("error: give URLs or --file", file=sys.stderr)
        return 2
    client = open_client(args)
    follow, recrawl = getattr(args, "follow", 0), getattr(args, "recrawl", False)
    try:
        count = client.submit_lines(_progress(_read_urls(args)), follow=follow, recrawl=recrawl, forget=forget,
                                    revisit=getattr(args, "revisit", 0.0),
                                    sitemap=getattr(args, "sitemap", False),
                                    discover_sitemaps=getattr(args, "discover_sitemaps", False))  # fmt: skip
    except SubmitError:
        if not still_reachable(client):  # the broker went away on the way
            raise KafkaUnreachable(client.kafka.bootstrap, "lost while submitting") from None
        raise
    if forget:
        print(f"sent {count} forget record(s) to {client.topics.urls} (applied by the instance owning each URL)")
    else:
        print(f"submitted {count} record(s) to {client.topics.urls}")
    return 0


def cmd_pages(args: argparse.Namespace) -> int:
    client = open_client(args)

    def undecodable(exc: Exception) -> None:
        print(json.dumps({"error": str(exc)}))

    pages = client.iter_pages(follow=args.follow, group=args.group or None, idle=args.idle, limit=args.limit,
                              on_error=undecodable, crawl=args.crawl or "*")  # fmt: skip
    if args.warc:
        return _pages_to_warc(args, pages)
    try:
        with closing(pages):
            for page in pages:
                out = {k: getattr(page, k) for k in page.__struct_fields__ if k != "body"}
                out["body_bytes"] = len(page.body)
                if args.body:
                    out["body"] = page.body.decode("utf-8", errors="replace")
                print(json.dumps(out), flush=True)
    except KeyboardInterrupt:
        pass
    return 0


def _pages_to_warc(args: argparse.Namespace, pages: Generator[Page, None, None]) -> int:
    """``pages --warc DIR``: the pages as WARC/1.1 files (frontier/archive.py); one JSON line at the end."""
    from frontier.archive import WarcFiles

    cfg = load_config(args)
    try:
        with closing(pages), WarcFiles(Path(args.warc), cfg.worker.user_agent, args.warc_max_bytes) as warc:
            try:
                for page in pages:
                    warc.write(page)
            except KeyboardInterrupt:
                pass
    except OSError as exc:
        print(f"crawl-frontier pages: cannot write WARC files in {args.warc}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"warc_files": [str(f) for f in warc.files], "pages_written": warc.written,
                      "not_fetched": warc.skipped}), flush=True)  # fmt: skip
    return 0


def register(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    s = add_command(sub, common, "submit", "publish URLs to crawl.urls")
    s.add_argument("urls", nargs="*")
    s.add_argument("--file", "-f", help="file with one URL or JSON submission per line ('-' for stdin)")
    s.add_argument("--follow", type=int, default=0, help="follow same-site links this many levels deep")
    s.add_argument("--revisit", type=_revisit, default=0.0, metavar="SECONDS|adaptive|MIN:MAX",
                   help="fetch again this long after each fetch; 'adaptive' or MIN:MAX seconds: an interval that "
                        "follows the page's changes (conditional requests; followed links inherit it)")  # fmt: skip
    s.add_argument("--sitemap", action="store_true",
                   help="the URLs are sitemaps (XML, index, gzip or text; a site's root: its robots.txt's "
                        "Sitemap lines): fetched as throttled jobs, the URLs they list submitted (--revisit passes "
                        "on)")  # fmt: skip
    s.add_argument("--discover-sitemaps", action="store_true",
                   help="also crawl the sitemaps the sites' robots.txt files name (Sitemap lines; each once "
                        "per crawl; --revisit passes on; redirect targets and followed links carry it on)")  # fmt: skip
    s.add_argument("--recrawl", action="store_true",
                   help="crawl again even if seen before (not twice while still queued or in flight)")  # fmt: skip
    s.add_argument("--crawl", type=crawl_name, default=None,
                   help="the crawl they belong to (default: 'default'); JSON lines may name their own")  # fmt: skip
    s.set_defaults(func=cmd_submit)

    fg = add_command(sub, common, "forget", "remove URLs from the seen set (a later submit crawls them again)")
    fg.add_argument("urls", nargs="*")
    fg.add_argument("--file", "-f", help="file with one URL or JSON submission per line ('-' for stdin)")
    fg.add_argument("--crawl", type=crawl_name, default=None, help="the crawl whose seen set (default: 'default')")
    fg.set_defaults(func=cmd_forget)

    pg = add_command(sub, common, "pages", "print fetched pages as JSON lines")
    pg.add_argument("--follow", action="store_true", help="keep waiting for new pages")
    pg.add_argument("--idle", type=float, default=5.0, help="without --follow: stop after this many idle seconds")
    pg.add_argument("--limit", type=int, default=0)
    pg.add_argument("--body", action="store_true", help="include the body (decoded as UTF-8)")
    pg.add_argument("--group", default="", help="consumer group (commits offsets); default: read everything")
    pg.add_argument("--crawl", type=crawl_name, default=None, help="only this crawl's pages (default: every crawl's)")
    pg.add_argument(
        "--warc",
        default="",
        metavar="DIR",
        help="write the pages as WARC/1.1 files (request and response records, gzip per record) in DIR",
    )
    pg.add_argument(
        "--warc-max-bytes",
        type=_positive_int,
        default=1_000_000_000,
        metavar="N",
        help="start a new WARC file once one reaches N bytes (default 1 GB)",
    )
    pg.set_defaults(func=cmd_pages)
