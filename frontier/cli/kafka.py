"""``crawl-frontier kafka up|down|status`` (the local broker or three-node cluster, deploy/kafka.py)
and ``crawl-frontier topics create`` (every topic, and whether they take the crawl's records)."""

from __future__ import annotations

import argparse
import sys

from frontier.cli.common import Subcommands, add_command, connect, load_config


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
    first = load_config(args).kafka.bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if host.strip("[]") in ("127.0.0.1", "localhost", "::1") and port.isdigit():
        return int(port)
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from topics.admin import check_limits, create_all, raise_limits

    cfg = load_config(args)
    kafka = connect(cfg)
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


def register(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    k = add_command(sub, common, "kafka", "start/stop the local single-node Kafka broker")
    k.add_argument("action", choices=["up", "down", "status"])
    k.add_argument("--nodes", type=int, default=1, help="3: a three-node KRaft cluster (ports 9092, 9192, 9292)")
    k.set_defaults(func=cmd_kafka)

    t = add_command(sub, common, "topics", "create every topic (idempotent)")
    t.add_argument("action", choices=["create"])
    t.add_argument("--partitions", type=int, default=0)
    t.add_argument("--replication", type=int, default=0)
    t.add_argument("--raise-limits", action="store_true",
                   help="raise max.message.bytes of existing topics that would refuse the crawl's records")  # fmt: skip
    t.set_defaults(func=cmd_topics)
