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
:class:`~frontier.client.FrontierClient`, the services through their ``run_*`` functions. One
module per group of commands, each adding its subcommands to the parser (``register``) next to
their handlers:

- :mod:`~frontier.cli.kafka`: ``kafka``, ``topics``;
- :mod:`~frontier.cli.submit`: ``submit``, ``forget``, ``pages`` (and its WARC output);
- :mod:`~frontier.cli.status`: ``status``, ``crawls``;
- :mod:`~frontier.cli.control`: ``crawl``, ``scope``;
- :mod:`~frontier.cli.run`: the services ``frontier``, ``router``, ``worker``, ``urlfrontier``, and ``demo``;
- :mod:`~frontier.cli.common`: what they share (configuration, Kafka check, client, ``--crawl``).

Here: the parser (:func:`build_parser`) and :func:`main`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from frontier.cli import control, kafka, run, status, submit
from frontier.client import SubmitError
from frontier.config import ConfigError
from topics.kafka import KafkaUnreachable

__all__ = ["build_parser", "main"]

GROUPS = (kafka, submit, status, control, run)  # in the order ``--help`` lists their commands


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
    for group in GROUPS:
        group.register(sub, common)
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
    except KeyboardInterrupt:  # Ctrl-C before a service took its signals over (waiting for Kafka, say)
        print("interrupted", file=sys.stderr)
        return 130
