"""Record size limits on the real broker: one oversized record does not stop URL intake, big
submissions are split into records the topic takes, and `topics create` sets and checks every
topic's max.message.bytes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]
from confluent_kafka.cimpl import NewTopic

from frontier.cli import main
from frontier.demo.stack import Stack, TopicReader, read_rejected, wait_until
from topics.admin import check_limits
from topics.catalog import ALL, FEEDBACK, PAGES, STATE, URL_BATCH_BYTES
from topics.schemas import Rejected, UrlBatch, decode


def test_an_oversized_record_does_not_stop_url_intake(bootstrap: str, tmp_path: Path) -> None:
    """An 800 KB random record used to make a Rejected over crawl.rejected's 1 MiB: the router
    failed, committed nothing, and failed again on the same batch forever. 40 submissions with
    60 KB of meta each made one 2.4 MB UrlBatch that crawl.urls.bydomain refused the same way."""
    stack = Stack(bootstrap, tmp_path / "stack", partitions=2, frontier={"embedded_router": False})
    big = os.urandom(800_000)
    ok = "http://ok.intake.test/"
    meta_urls = [f"http://meta.intake.test/{i}" for i in range(40)]
    bydomain = rejected_reader = None
    try:
        stack.create_topics()
        stack.start_router()
        producer = Producer({**stack.client, "message.max.bytes": 2_000_000})
        big_at: list[int] = []  # where the broker put it (retries may reorder a non-idempotent producer)
        producer.produce(stack.topics.urls, big, partition=0,
                         on_delivery=lambda err, msg: big_at.append(msg.offset()))  # fmt: skip
        producer.produce(stack.topics.urls, ok.encode(), partition=0)
        for url in meta_urls:
            producer.produce(stack.topics.urls, json.dumps({"url": url, "meta": {"blob": "m" * 60_000}}).encode(),
                             partition=0)  # fmt: skip
        assert producer.flush(30) == 0

        bydomain = TopicReader(stack.client, stack.topics.bydomain)
        rejected_reader = TopicReader(stack.client, stack.topics.rejected)
        routed: list[str] = []
        sizes: list[int] = []
        rejected: list[Rejected] = []

        def through() -> bool:
            stack.check_alive()  # the router must not have failed
            for value in bydomain.poll(0.2):
                sizes.append(len(value))
                routed.extend(item.url for item in decode(value, UrlBatch).items)
            rejected.extend(read_rejected(rejected_reader, timeout=0.05))
            return ok in routed and set(meta_urls) <= set(routed) and bool(rejected)

        wait_until(through, timeout=60, what="the normal URL routed and the big record rejected")
        [rej] = rejected
        assert rej.reason.startswith("record too large")
        assert rej.original_length == len(big) and rej.original_sha256 == hashlib.sha256(big).hexdigest()
        assert rej.original == big[: len(rej.original)] and 0 < len(rej.original) < len(big)
        assert (rej.topic, rej.partition, rej.offset) == (stack.topics.urls, 0, big_at[0])
        assert max(sizes) <= URL_BATCH_BYTES and len(sizes) >= 10, sizes
        stack.check_alive()
    finally:
        for reader in (bydomain, rejected_reader):
            if reader is not None:
                reader.close()
        stack.stop_all()


def _limits(bootstrap: str, names: list[str]) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names])
    return {res.name: int(f.result()["max.message.bytes"].value) for res, f in futures.items()}


def test_topics_create_sets_every_limit_and_reports_topics_that_refuse_our_records(
    bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = Stack(bootstrap, tmp_path / "fresh", partitions=2)
    assert len(check_limits(fresh.client, fresh.topics)) == len(ALL)  # nothing created yet: all missing
    assert main(["--config", str(fresh.config_path), "topics", "create"]) == 0
    out = capsys.readouterr().out
    assert "every topic takes the largest records" in out and "problem" not in out
    limits = _limits(bootstrap, [fresh.topics.name(spec) for spec in ALL])
    assert limits == {fresh.topics.name(spec): spec.max_message_bytes for spec in ALL}
    assert limits[fresh.topics.pages] == limits[fresh.topics.feedback] == 16 * 1024 * 1024
    assert check_limits(fresh.client, fresh.topics) == []

    # topics made before the limits were set (or by hand): the broker's 1 MiB default
    old = Stack(bootstrap, tmp_path / "old", partitions=2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    made = admin.create_topics([NewTopic(old.topics.name(spec), num_partitions=2, replication_factor=1)
                                for spec in (FEEDBACK, PAGES, STATE)])  # fmt: skip
    for future in made.values():
        future.result()
    assert main(["--config", str(old.config_path), "topics", "create"]) == 1
    out = capsys.readouterr().out
    problems = [line for line in out.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 2, out  # crawl.frontier.state needs no more than the default
    assert any(p.startswith(f"problem: {old.topics.feedback}: max.message.bytes is ") for p in problems), out
    assert any(p.startswith(f"problem: {old.topics.pages}: ") and "--add-config max.message.bytes=" in p
               for p in problems), out  # fmt: skip
    assert len(check_limits(old.client, old.topics, max_body_bytes=1024)) == 2
    # --raise-limits raises exactly those two, to what a new topic gets, and never lowers one
    before = _limits(bootstrap, [old.topics.state])
    assert main(["--config", str(old.config_path), "topics", "create", "--raise-limits"]) == 0
    out = capsys.readouterr().out
    assert f"raised max.message.bytes of {old.topics.feedback}" in out and "problem" not in out, out
    assert f"raised max.message.bytes of {old.topics.pages}" in out, out
    assert _limits(bootstrap, [old.topics.feedback, old.topics.pages]) == {
        old.topics.feedback: FEEDBACK.max_message_bytes, old.topics.pages: PAGES.max_message_bytes}  # fmt: skip
    assert _limits(bootstrap, [old.topics.state]) == before
    assert check_limits(old.client, old.topics) == []
