"""The services: ``crawl-frontier frontier``, ``router``, ``worker`` and ``urlfrontier``, and the
local ``demo``. Each command imports its ``run_*`` entry point when it runs, so that the other
commands start without loading the services. A service waits up to
:data:`~frontier.cli.common.SERVICE_WAIT` seconds for a broker that is starting with it, and warns
about topics that would refuse its records."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace

from frontier.cli.common import Subcommands, add_command, connect_service, crawl_name, load_config
from frontier.config import Config
from topics.kafka import Kafka
from topics.schemas import DEFAULT_CRAWL


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

    cfg = load_config(args)
    check_exposure(cfg.frontier)  # no live page off loopback without a token: one line, exit status 2
    if args.debug_throttle:
        cfg = replace(cfg, frontier=replace(cfg.frontier, debug_throttle=True))
    lock_state_dir(cfg.frontier.state_dir, cfg.frontier.app_id)  # one line (status 2) before waiting for Kafka
    kafka = connect_service(cfg)
    _check_topic_limits(cfg, kafka)
    run_frontier(cfg, loglevel=args.loglevel, kafka=kafka)
    return 0


def cmd_router(args: argparse.Namespace) -> int:
    import signal
    import threading

    from frontier.intake.router import run_router
    from frontier.service.app import router_group

    cfg = load_config(args)
    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    kafka = connect_service(cfg)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return run_router(kafka, cfg.topics, router_group(cfg), stop, ip_scope=cfg.frontier.ip_scope)


def cmd_worker(args: argparse.Namespace) -> int:
    from workers.fetcher.worker import load_fetcher, run_worker

    cfg = load_config(args)
    spec = args.fetcher or cfg.worker.fetcher
    fetcher = load_fetcher(spec, cfg) if spec else None  # a bad one: one line, before any connection
    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    kafka = connect_service(cfg)
    _check_topic_limits(cfg, kafka)
    run_worker(cfg, args.concurrency, kafka=kafka, fetcher=fetcher, crawl=args.crawl)
    return 0


def cmd_urlfrontier(args: argparse.Namespace) -> int:
    from workers.urlfrontier.security import check_exposure
    from workers.urlfrontier.server import run_gateway

    cfg = load_config(args)
    if args.port is not None or args.bind is not None:
        gw = cfg.urlfrontier
        gw = replace(gw, port=args.port if args.port is not None else gw.port,
                     bind=args.bind if args.bind is not None else gw.bind)  # fmt: skip
        gw.validate()
        cfg = replace(cfg, urlfrontier=gw)
    check_exposure(cfg.urlfrontier)  # no gateway off loopback that anyone may call: one line, exit status 2
    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    kafka = connect_service(cfg)
    _check_topic_limits(cfg, kafka)
    run_gateway(cfg, kafka)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from frontier.demo.crawl import run_demo

    return run_demo(duration=args.duration, sites=args.sites, pages=args.pages, linger=args.linger)


def register(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    f = add_command(sub, common, "frontier", "run a frontier instance")
    f.add_argument("--loglevel", default="info", choices=["debug", "info", "warn", "error"])
    f.add_argument("--debug-throttle", action="store_true", help="log every scope delay change with its cause")
    f.set_defaults(func=cmd_frontier)

    r = add_command(sub, common, "router", "run a standalone router (crawl.urls -> crawl.urls.bydomain)")
    r.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    r.set_defaults(func=cmd_router)

    w = add_command(sub, common, "worker", "run a fetch worker")
    w.add_argument("--concurrency", "-n", type=int, default=None)
    w.add_argument(
        "--fetcher",
        default=None,
        metavar="MODULE:FACTORY",
        help="fetch with FACTORY(config) from MODULE instead of the built-in fetcher (docs/WORKERS.md)",
    )
    w.add_argument("--crawl", type=crawl_name, default=DEFAULT_CRAWL,
                   help="take the jobs of this crawl only (its own jobs topic and worker group)")  # fmt: skip
    w.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    w.set_defaults(func=cmd_worker)

    g = add_command(
        sub, common, "urlfrontier", "serve the URLFrontier gRPC API (crawler-commons 2.6) over the frontier"
    )
    g.add_argument("--port", type=int, default=None, help="listen on this port (default: urlfrontier.port, 7071)")
    g.add_argument("--bind", default=None, help="listen on this address (default: urlfrontier.bind, 127.0.0.1; "
                   "beyond loopback it needs urlfrontier.token, tls_client_ca or allow_clients)")  # fmt: skip
    g.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    g.set_defaults(func=cmd_urlfrontier)

    d = add_command(sub, common, "demo", "a local demo crawl: Kafka, frontier, 2 workers, demo sites")
    d.add_argument("--duration", type=float, default=60.0, help="upper bound on the crawl, seconds")
    d.add_argument("--sites", type=int, default=4)
    d.add_argument("--pages", type=int, default=12)
    d.add_argument("--linger", type=float, default=0.0, help="keep the stack (and its live page) up this long after")
    d.set_defaults(func=cmd_demo)
