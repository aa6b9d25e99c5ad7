"""``crawl-frontier``: the one console script.

Subcommands: ``kafka up|down|status``, ``topics create``, ``submit``, ``forget``, ``pages``, ``status``,
``scope``, ``crawls``, ``crawl``, ``frontier``, ``router``, ``worker``, ``demo``. Every command takes ``--config FILE``
(TOML; see ``frontier.config``) and ``--verbose``; errors in arguments or configuration print one
clear line and exit with status 2. Every command that needs Kafka first checks that it answers:
if not, one line ("cannot reach Kafka at ...: is `crawl-frontier kafka up` running?") and exit
status 1 within seconds (``frontier``, ``router`` and ``worker`` wait up to 30 s for a broker
that is starting). librdkafka's own log lines go to the ``topics.kafka.librdkafka`` logger:
quiet unless ``--verbose`` here, WARNING and up in the services' logs.

A thin shell: submissions, pages, status and scope commands go through
:class:`~frontier.client.FrontierClient`, the services through their ``run_*`` functions. Over
300 lines because it is the whole command line in one place: the argument table
(:func:`build_parser`, a third of it) and one short handler per subcommand, no logic of its own.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import replace
from pathlib import Path

from frontier.client import FrontierClient, SubmitError, read_lines, submission_value
from frontier.config import Config, ConfigError, load
from frontier.core import revisit
from topics.kafka import Kafka, KafkaUnreachable
from topics.schemas import DEFAULT_CRAWL, ControlCommand, Page, valid_crawl

__all__ = ["build_parser", "main", "submission_value"]

CHECK_TIMEOUT = 3.0  # seconds a command waits for the brokers' metadata before saying they are unreachable
SERVICE_WAIT = 30.0  # frontier, router and worker keep asking this long (a broker starting with them)


def _config(args: argparse.Namespace) -> Config:
    return load(args.config)


def _kafka(cfg: Config, wait: float = 0.0) -> Kafka:
    """The configured cluster, once it answered (else :class:`KafkaUnreachable`: one line from ``main``)."""
    kafka = Kafka(cfg.kafka.client_conf())
    kafka.check(CHECK_TIMEOUT, wait)
    return kafka


def _client(args: argparse.Namespace) -> FrontierClient:
    client = FrontierClient(_config(args), crawl=getattr(args, "crawl", None) or DEFAULT_CRAWL)
    client.check(CHECK_TIMEOUT)
    return client


def cmd_kafka(args: argparse.Namespace) -> int:
    from deploy.kafka import KafkaError, default_broker, default_cluster

    port = _local_port(args)
    broker = default_broker(port)
    cluster = default_cluster(args.nodes, port) if args.nodes > 1 else None
    try:
        if args.action == "up":
            if cluster is not None:
                was_running = cluster.running()
                bootstrap = cluster.up()
            else:
                was_running = broker.running_pid() is not None
                bootstrap = broker.up()
            print(f"kafka {'already running' if was_running else 'started'} at {bootstrap}")
        elif args.action == "down":
            stopped = cluster.down() if cluster is not None else broker.down()
            print("kafka stopped" if stopped else "kafka was not running (nothing started by us)")
        else:
            if cluster is not None:
                pids = [n.running_pid() for n in cluster.nodes]
                print(f"kafka nodes at {cluster.bootstrap}: pids {pids}")
                return 0 if all(pids) else 1
            pid = broker.running_pid()
            print(f"kafka running at {broker.bootstrap} (pid {pid})" if pid else "kafka not running")
            return 0 if pid else 1
    except KafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _local_port(args: argparse.Namespace) -> int:
    """The port of the configuration's ``kafka.bootstrap`` when it names a broker on this machine
    that ``kafka up`` may run (loopback); 0: the default (``CRAWL_KAFKA_PORT``, else 9092). Only with
    ``--config`` (or its environment variable): without one, ``kafka up`` is the README's default."""
    if not getattr(args, "config", None):
        return 0
    first = _config(args).kafka.bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if host.strip("[]") in ("127.0.0.1", "localhost", "::1") and port.isdigit():
        return int(port)
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from topics.admin import check_limits, create_all, raise_limits

    cfg = _config(args)
    kafka = _kafka(cfg)
    topics = cfg.topics
    if args.partitions:
        topics = replace(topics, partitions=args.partitions)
    if args.replication:
        topics = replace(topics, replication=args.replication)
    created = create_all(kafka, topics)
    for name in created:
        print(f"created {name}")
    print(f"{len(created)} topic(s) created, {topics.partitions} partitions each")
    # existing topics are left as they are: say whether they take the largest records we produce
    body = cfg.worker.max_body_bytes
    if args.raise_limits:
        for name in raise_limits(kafka, topics, max_body_bytes=body):
            print(f"raised max.message.bytes of {name}")
    problems = check_limits(kafka, topics, max_body_bytes=body)
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        print(f"{len(problems)} topic(s) would refuse records the crawl produces: fix them before starting it")
        return 1
    print("max.message.bytes: every topic takes the largest records the crawl produces")
    return 0


def _revisit(text: str) -> float | str | list[float]:
    """``--revisit``: seconds, ``adaptive`` or ``MIN:MAX`` seconds (a clear error otherwise)."""
    try:
        return revisit.spec_of(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}" if "revisit" in str(exc) else
                                         f"{text!r}: seconds, 'adaptive' or MIN:MAX seconds") from None  # fmt: skip


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
        _config(args)  # a configuration error comes first, as before
        print("error: give URLs or --file", file=sys.stderr)
        return 2
    client = _client(args)
    follow, recrawl = getattr(args, "follow", 0), getattr(args, "recrawl", False)
    try:
        count = client.submit_lines(_progress(_read_urls(args)), follow=follow, recrawl=recrawl, forget=forget,
                                    revisit=getattr(args, "revisit", 0.0),
                                    sitemap=getattr(args, "sitemap", False),
                                    discover_sitemaps=getattr(args, "discover_sitemaps", False))  # fmt: skip
    except SubmitError:
        if not client.kafka.reachable(CHECK_TIMEOUT):  # the broker went away on the way
            raise KafkaUnreachable(client.kafka.bootstrap, "lost while submitting") from None
        raise
    if forget:
        print(f"sent {count} forget record(s) to {client.topics.urls} (applied by the instance owning each URL)")
    else:
        print(f"submitted {count} record(s) to {client.topics.urls}")
    return 0


def cmd_pages(args: argparse.Namespace) -> int:
    client = _client(args)

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

    cfg = _config(args)
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


def cmd_status(args: argparse.Namespace) -> int:
    from frontier.client.crawls import render_crawls
    from frontier.client.status import LIVE_SECONDS, render

    client = _client(args)
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


def cmd_scope(args: argparse.Namespace) -> int:
    cmd = ControlCommand(action=args.action, scope=args.name.strip().lower(), delay=args.delay,
                         concurrency=args.concurrency)  # fmt: skip
    return _send(
        args, cmd, f"{args.action} {cmd.scope} (applied by the instance owning it; see `crawl-frontier status`)"
    )


def _send(args: argparse.Namespace, cmd: ControlCommand, sent: str) -> int:
    """Validate ``cmd`` (one line and status 2 when it is refused), send it, say ``sent``."""
    try:
        cmd.validate()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with _client(args) as client:
        client.control(cmd)
    print(f"sent: {sent}")
    return 0


def cmd_crawls(args: argparse.Namespace) -> int:
    from frontier.client.crawls import render_crawls
    from frontier.client.status import LIVE_SECONDS

    client = _client(args)
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


def cmd_crawl(args: argparse.Namespace) -> int:
    per_host = args.per_host if args.action == "limit" else None
    if args.action == "limit" and per_host is None:
        print("error: limit needs --per-host N (0 removes the limit)", file=sys.stderr)
        return 2
    cmd = ControlCommand(action=args.action, crawl=args.name, forget=args.forget, per_host=per_host)
    return _send(args, cmd, f"{args.action} crawl {args.name!r} to every partition (see `crawl-frontier crawls`)")


def _crawl_name(value: str) -> str:
    try:
        return valid_crawl(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value!r}")
    return n


def _check_topic_limits(cfg: Config, kafka: Kafka) -> None:
    """At start: warn, one clear line per topic, when a topic is missing or its
    ``max.message.bytes`` is below the largest record this process may produce on it. A warning,
    not a refusal: an operator may keep pages small on purpose (a refused page becomes an error
    page, see docs/GUARANTEES.md)."""
    from topics.admin import check_limits

    problems = check_limits(kafka, cfg.topics, max_body_bytes=cfg.worker.max_body_bytes)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    if problems:
        print("warning: `crawl-frontier topics create --raise-limits` creates and raises them", file=sys.stderr)


def cmd_frontier(args: argparse.Namespace) -> int:
    from frontier.observability.web import check_exposure
    from frontier.service.app import run_frontier
    from frontier.service.lock import lock_state_dir

    cfg = _config(args)
    check_exposure(cfg.frontier)  # no live page off loopback without a token: one line, exit status 2
    if args.debug_throttle:
        cfg = replace(cfg, frontier=replace(cfg.frontier, debug_throttle=True))
    lock_state_dir(cfg.frontier.state_dir, cfg.frontier.app_id)  # one line (status 2) before waiting for Kafka
    kafka = _kafka(cfg, wait=SERVICE_WAIT)
    _check_topic_limits(cfg, kafka)
    run_frontier(cfg, loglevel=args.loglevel, kafka=kafka)
    return 0


def cmd_router(args: argparse.Namespace) -> int:
    import signal
    import threading

    from frontier.intake.router import run_router
    from frontier.service.app import router_group

    cfg = _config(args)
    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    kafka = _kafka(cfg, wait=SERVICE_WAIT)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return run_router(kafka, cfg.topics, router_group(cfg), stop, ip_scope=cfg.frontier.ip_scope)


def cmd_worker(args: argparse.Namespace) -> int:
    from workers.fetcher.worker import load_fetcher, run_worker

    cfg = _config(args)
    spec = args.fetcher or cfg.worker.fetcher
    fetcher = load_fetcher(spec, cfg) if spec else None  # a bad one: one line, before any connection
    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    kafka = _kafka(cfg, wait=SERVICE_WAIT)
    _check_topic_limits(cfg, kafka)
    run_worker(cfg, args.concurrency, kafka=kafka, fetcher=fetcher, crawl=args.crawl)
    return 0


def cmd_urlfrontier(args: argparse.Namespace) -> int:
    from workers.urlfrontier.security import check_exposure
    from workers.urlfrontier.server import run_gateway

    cfg = _config(args)
    if args.port is not None or args.bind is not None:
        gw = cfg.urlfrontier
        gw = replace(gw, port=args.port if args.port is not None else gw.port,
                     bind=args.bind if args.bind is not None else gw.bind)  # fmt: skip
        gw.validate()
        cfg = replace(cfg, urlfrontier=gw)
    check_exposure(cfg.urlfrontier)  # no gateway off loopback that anyone may call: one line, exit status 2
    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    kafka = _kafka(cfg, wait=SERVICE_WAIT)
    _check_topic_limits(cfg, kafka)
    run_gateway(cfg, kafka)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from frontier.demo.crawl import run_demo

    return run_demo(duration=args.duration, sites=args.sites, pages=args.pages, linger=args.linger)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crawl-frontier", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", "-c", type=Path, default=None, help="TOML configuration file")
    p.add_argument("--verbose", "-v", action="store_true", help="log what happens, librdkafka's lines included")
    # --config is also accepted after the subcommand (``crawl-frontier status --config x.toml``);
    # SUPPRESS keeps the value given before it when it is not repeated
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", "-c", type=Path, default=argparse.SUPPRESS, help="TOML configuration file")
    common.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS,
                        help="log what happens, librdkafka's lines included")  # fmt: skip
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, about: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=about)

    k = command("kafka", "start/stop the local single-node Kafka broker")
    k.add_argument("action", choices=["up", "down", "status"])
    k.add_argument("--nodes", type=int, default=1, help="3: a three-node KRaft cluster (ports 9092, 9192, 9292)")
    k.set_defaults(func=cmd_kafka)

    t = command("topics", "create every topic (idempotent)")
    t.add_argument("action", choices=["create"])
    t.add_argument("--partitions", type=int, default=0)
    t.add_argument("--replication", type=int, default=0)
    t.add_argument("--raise-limits", action="store_true",
                   help="raise max.message.bytes of existing topics that would refuse the crawl's records")  # fmt: skip
    t.set_defaults(func=cmd_topics)

    s = command("submit", "publish URLs to crawl.urls")
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
    s.add_argument("--crawl", type=_crawl_name, default=None,
                   help="the crawl they belong to (default: 'default'); JSON lines may name their own")  # fmt: skip
    s.set_defaults(func=cmd_submit)

    fg = command("forget", "remove URLs from the seen set (a later submit crawls them again)")
    fg.add_argument("urls", nargs="*")
    fg.add_argument("--file", "-f", help="file with one URL or JSON submission per line ('-' for stdin)")
    fg.add_argument("--crawl", type=_crawl_name, default=None, help="the crawl whose seen set (default: 'default')")
    fg.set_defaults(func=cmd_forget)

    pg = command("pages", "print fetched pages as JSON lines")
    pg.add_argument("--follow", action="store_true", help="keep waiting for new pages")
    pg.add_argument("--idle", type=float, default=5.0, help="without --follow: stop after this many idle seconds")
    pg.add_argument("--limit", type=int, default=0)
    pg.add_argument("--body", action="store_true", help="include the body (decoded as UTF-8)")
    pg.add_argument("--group", default="", help="consumer group (commits offsets); default: read everything")
    pg.add_argument("--crawl", type=_crawl_name, default=None, help="only this crawl's pages (default: every crawl's)")
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

    st = command("status", "totals and the busiest scopes, from every live frontier instance")
    st.add_argument("--top", type=int, default=20)
    st.add_argument("--watch", action="store_true", help="refresh until interrupted")
    st.add_argument("--interval", type=float, default=2.0)
    st.add_argument("--all", action="store_true", help="include snapshots of instances that went silent")
    st.add_argument("--crawl", type=_crawl_name, default=None, help="one crawl's counts (see `crawls`)")
    st.set_defaults(func=cmd_status)

    cs = command("crawls", "every crawl: queued, in flight, done, errors, pages/s, workers")
    cs.add_argument("--wait", type=_crawl_name, default=None, metavar="NAME",
                    help="block until crawl NAME is finished (exit 0), or say what is left (exit 1)")  # fmt: skip
    cs.add_argument("--timeout", type=float, default=600.0, help="--wait: seconds at most")
    cs.add_argument("--window", type=float, default=0.0,
                    help="--wait: a revisit due within this many seconds counts as work left")  # fmt: skip
    cs.set_defaults(func=cmd_crawls)

    cr = command("crawl", "pause/resume/drop one crawl, or limit the URLs it queues per host")
    cr.add_argument("action", choices=["pause", "resume", "drop", "limit"])
    cr.add_argument("name", type=_crawl_name, help="the crawl")
    cr.add_argument("--forget", action="store_true", help="drop: forget its seen URLs too (crawled again if submitted)")
    cr.add_argument("--per-host", type=int, default=None, help="limit: URLs queued per host at most (0: no limit)")
    cr.set_defaults(func=cmd_crawl)

    sc = command("scope", "pause/resume/drop a scope, or set/clear its delay and concurrency")
    sc.add_argument("action", choices=["pause", "resume", "drop", "set", "clear"])
    sc.add_argument("name", help="a host, a registrable domain (all its hosts) or domain#scope")
    sc.add_argument("--delay", type=float, default=None, help="set: seconds between requests")
    sc.add_argument("--concurrency", type=int, default=None, help="set: requests in flight at once")
    sc.set_defaults(func=cmd_scope)

    f = command("frontier", "run a frontier instance")
    f.add_argument("--loglevel", default="info", choices=["debug", "info", "warn", "error"])
    f.add_argument("--debug-throttle", action="store_true", help="log every scope delay change with its cause")
    f.set_defaults(func=cmd_frontier)

    r = command("router", "run a standalone router (crawl.urls -> crawl.urls.bydomain)")
    r.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    r.set_defaults(func=cmd_router)

    w = command("worker", "run a fetch worker")
    w.add_argument("--concurrency", "-n", type=int, default=None)
    w.add_argument(
        "--fetcher",
        default=None,
        metavar="MODULE:FACTORY",
        help="fetch with FACTORY(config) from MODULE instead of the built-in fetcher (docs/WORKERS.md)",
    )
    w.add_argument("--crawl", type=_crawl_name, default=DEFAULT_CRAWL,
                   help="take the jobs of this crawl only (its own jobs topic and worker group)")  # fmt: skip
    w.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    w.set_defaults(func=cmd_worker)

    g = command("urlfrontier", "serve the URLFrontier gRPC API (crawler-commons 2.6) over the frontier")
    g.add_argument("--port", type=int, default=None, help="listen on this port (default: urlfrontier.port, 7071)")
    g.add_argument("--bind", default=None, help="listen on this address (default: urlfrontier.bind, 127.0.0.1; "
                   "beyond loopback it needs urlfrontier.token, tls_client_ca or allow_clients)")  # fmt: skip
    g.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    g.set_defaults(func=cmd_urlfrontier)

    d = command("demo", "a local demo crawl: Kafka, frontier, 2 workers, demo sites")
    d.add_argument("--duration", type=float, default=60.0, help="upper bound on the crawl, seconds")
    d.add_argument("--sites", type=int, default=4)
    d.add_argument("--pages", type=int, default=12)
    d.add_argument("--linger", type=float, default=0.0, help="keep the stack (and its live page) up this long after")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose and not hasattr(args, "loglevel"):  # the services configure logging themselves
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except KafkaUnreachable as exc:
        print(exc, file=sys.stderr)
        return 1
    except SubmitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
