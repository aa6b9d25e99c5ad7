"""What every command group of ``crawl-frontier`` shares: the configuration, the Kafka check
(one line and exit status 1 when no broker answers), the client, the ``--crawl`` argument type
and the way a group adds its subcommands to the parser."""

from __future__ import annotations

import argparse
from typing import TypeAlias

from frontier.client import FrontierClient
from frontier.config import Config, load
from topics.kafka import Kafka
from topics.schemas import DEFAULT_CRAWL, valid_crawl

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # what add_subparsers returns

CHECK_TIMEOUT = 3.0  # seconds a command waits for the brokers' metadata before saying they are unreachable
SERVICE_WAIT = 30.0  # frontier, router and worker keep asking this long (a broker starting with them)


def load_config(args: argparse.Namespace) -> Config:
    return load(args.config)


def connect(cfg: Config, wait: float = 0.0) -> Kafka:
    """The configured cluster, once it answered (else :class:`KafkaUnreachable`: one line from ``main``)."""
    kafka = Kafka(cfg.kafka.client_conf())
    kafka.check(CHECK_TIMEOUT, wait)
    return kafka


def connect_service(cfg: Config) -> Kafka:
    """:func:`connect` for a service: it waits up to :data:`SERVICE_WAIT` for a broker that is starting."""
    return connect(cfg, wait=SERVICE_WAIT)


def open_client(args: argparse.Namespace) -> FrontierClient:
    client = FrontierClient(load_config(args), crawl=getattr(args, "crawl", None) or DEFAULT_CRAWL)
    client.check(CHECK_TIMEOUT)
    return client


def still_reachable(client: FrontierClient) -> bool:
    """Whether the client's broker still answers (asked when an operation failed on the way)."""
    return client.kafka.reachable(CHECK_TIMEOUT)


def crawl_name(value: str) -> str:
    try:
        return valid_crawl(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_command(sub: Subcommands, common: argparse.ArgumentParser, name: str, about: str) -> argparse.ArgumentParser:
    """A subcommand that also takes the ``common`` options (``--config``, ``--verbose``) after its name."""
    return sub.add_parser(name, parents=[common], help=about)
