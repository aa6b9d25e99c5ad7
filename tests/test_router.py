"""The router's intake never stops on one record: UrlBatch records are bounded by bytes, a URL too
large alone is rejected, rejections are bounded, and a rejection the broker refuses is published
again without its original. Delivery is a fake broker with a per-topic record size limit."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from confluent_kafka import KafkaError, Message

from frontier.intake.addresses import Resolver
from frontier.intake.router import TOO_LARGE, Outgoing, batch_record, forward, pack
from topics.catalog import URL_BATCH_BYTES, Topics
from topics.partitioning import partition_for
from topics.schemas import REJECTED_ORIGINAL_BYTES, Rejected, UrlBatch, UrlItem, decode, encode

TOPICS = Topics(prefix="t.", partitions=4)
MiB = 1024 * 1024


class FakeBroker:
    """Accepts a record when it is within its topic's limit (Kafka's 1 MiB default unless told),
    and when ``accept`` agrees; keeps what it accepted."""

    def __init__(self, limits: dict[str, int] | None = None, accept: object = None) -> None:
        self.limits = limits or {}
        self.accept = accept
        self.records: list[Outgoing] = []
        self.rounds = 0

    def __call__(self, outs: list[Outgoing]) -> None:
        self.rounds += 1
        for out in outs:
            if len(out.value) > self.limits.get(out.topic, MiB):
                out.error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
            elif callable(self.accept) and not self.accept(out):
                out.error = KafkaError(KafkaError.INVALID_RECORD, "Broker: refused")
            else:
                out.error = None
                self.records.append(out)

    def on(self, topic: str) -> list[bytes]:
        return [o.value for o in self.records if o.topic == topic]

    def urls(self) -> list[str]:
        return [item.url for v in self.on(TOPICS.bydomain) for item in decode(v, UrlBatch).items]

    def rejected(self) -> list[Rejected]:
        return [decode(v, Rejected) for v in self.on(TOPICS.rejected)]


def msgs(*values: bytes) -> list[Message]:
    return [Message(topic=TOPICS.urls, partition=0, offset=i, value=v) for i, v in enumerate(values)]


def submission(url: str, meta_bytes: int) -> bytes:
    return json.dumps({"url": url, "meta": {"blob": "x" * meta_bytes}}).encode()


def test_batch_record_is_what_encode_gives() -> None:
    items = [UrlItem(url=f"http://a.test/{i}", host="a.test", domain="a.test", meta={"i": i}) for i in range(3)]
    assert batch_record([encode(i) for i in items]) == encode(UrlBatch(items=items))
    assert batch_record([]) == encode(UrlBatch(items=[]))


def test_pack_bounds_records_by_bytes_and_count_and_sets_aside_items_too_large_alone() -> None:
    sizes = [100, 300, 50, 2000, 400, 400, 10, 10, 10]
    entries = [(b'"' + b"x" * (n - 2) + b'"', i) for i, n in enumerate(sizes)]
    records, too_big = pack(entries, max_bytes=1000, max_items=3)
    assert too_big == [3]
    assert [tags for _, tags in records] == [[0, 1, 2], [4, 5, 6], [7, 8]]
    for value, tags in records:
        assert len(value) <= 1000
        assert value == batch_record([entries[t][0] for t in tags])


def test_a_big_meta_batch_is_split_under_the_limit() -> None:
    """2,000-item batches had no byte bound: 40 submissions of 60 KB meta made one 2.4 MB record
    that the broker refused, and the router failed on it again and again."""
    urls = [f"http://big.test/{i}" for i in range(40)]
    broker = FakeBroker()
    routed, rejected = forward(msgs(*(submission(u, 60_000) for u in urls)), TOPICS, broker)
    assert (routed, rejected) == (40, 0)
    assert sorted(broker.urls()) == sorted(urls)
    assert all(len(v) <= URL_BATCH_BYTES for v in broker.on(TOPICS.bydomain))
    assert len(broker.on(TOPICS.bydomain)) >= 10


def test_an_oversized_random_record_is_rejected_bounded_and_the_next_url_gets_through() -> None:
    """An ~800 KB high-entropy record made a Rejected of ~1.07 MB (base64): over the broker's
    1 MiB, refused, nothing committed, the same batch again forever."""
    big = os.urandom(800_000)
    broker = FakeBroker()
    routed, rejected = forward(msgs(big, b"http://ok.test/"), TOPICS, broker)
    assert (routed, rejected) == (1, 1)
    assert broker.urls() == ["http://ok.test/"]
    [rej] = broker.rejected()
    assert rej.reason.startswith("record too large")
    assert rej.original == big[:REJECTED_ORIGINAL_BYTES] and rej.truncated
    assert rej.original_length == len(big) and rej.original_sha256 == hashlib.sha256(big).hexdigest()
    assert (rej.topic, rej.partition, rej.offset) == (TOPICS.urls, 0, 0)
    assert len(broker.on(TOPICS.rejected)[0]) < 16 * 1024


def test_a_url_too_large_alone_for_a_batch_record_is_rejected() -> None:
    raw = submission("http://huge.test/", 3000)
    broker = FakeBroker()
    routed, rejected = forward(msgs(raw, b"http://ok.test/"), TOPICS, broker, max_bytes=2000)
    assert (routed, rejected) == (1, 1)
    assert broker.urls() == ["http://ok.test/"]
    [rej] = broker.rejected()
    assert rej.reason.startswith(TOO_LARGE) and rej.original == raw and rej.offset == 0


def test_a_topic_with_a_smaller_limit_splits_batches_then_rejects_a_url_refused_alone() -> None:
    """The bydomain topic only takes 20 KB: batches are halved until they pass; the URL that is
    refused even alone becomes a rejection, and everything else gets through."""
    urls = [f"http://s.test/{i}" for i in range(30)]
    values = [submission(u, 1000) for u in urls] + [submission("http://s.test/huge", 30_000)]
    broker = FakeBroker(limits={TOPICS.bydomain: 20_000})
    routed, rejected = forward(msgs(*values), TOPICS, broker)
    assert (routed, rejected) == (30, 1)
    assert sorted(broker.urls()) == sorted(urls)
    [rej] = broker.rejected()
    assert rej.reason.startswith(TOO_LARGE) and "MSG_SIZE_TOO_LARGE" in rej.reason and rej.offset == 30


def test_a_refused_rejection_is_published_again_without_its_original() -> None:
    broker = FakeBroker(accept=lambda out: out.rejected is None or not out.rejected.original)
    routed, rejected = forward(msgs(b"ftp://x.test/file", b"http://ok.test/"), TOPICS, broker)
    assert (routed, rejected) == (1, 1)
    [rej] = broker.rejected()
    assert rej.original == b"" and rej.reason.startswith("unsupported scheme") and "original not kept" in rej.reason
    assert rej.original_length == len(b"ftp://x.test/file")
    assert rej.original_sha256 == hashlib.sha256(b"ftp://x.test/file").hexdigest()


def test_failures_not_about_one_record_stop_the_router_uncommitted() -> None:
    def down(outs: list[Outgoing]) -> None:
        for out in outs:
            out.error = KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out")

    with pytest.raises(RuntimeError, match="could not deliver"):
        forward(msgs(b"http://ok.test/"), TOPICS, down)
    with pytest.raises(RuntimeError, match="even a minimal rejection"):
        forward(msgs(b"ftp://x.test/"), TOPICS, FakeBroker(accept=lambda out: out.rejected is None))


def test_the_63kb_submission_with_9000_scopes_is_rejected_with_the_reason() -> None:
    """Issue 13: it made a 171 KB queue key and 9,003 changelog records to dispatch one job."""
    raw = json.dumps({"url": "http://many.test/", "scopes": [f"{i:x}" for i in range(9000)]},
                     separators=(",", ":")).encode()  # fmt: skip
    assert 50_000 < len(raw) < 64 * 1024
    broker = FakeBroker()
    assert forward(msgs(raw, b"http://ok.test/"), TOPICS, broker) == (1, 1)
    [rej] = broker.rejected()
    assert rej.reason == "too many scopes (9000 > 8)" and rej.original_length == len(raw)


def test_with_a_resolver_urls_are_keyed_by_their_hosts_address() -> None:
    table = {"a.test": ["10.1.1.1"], "www.b.test": ["10.1.1.1"]}
    resolver = Resolver(lambda host: table[host] if host in table else socket_error(host))
    try:
        broker = FakeBroker()
        values = [b"http://a.test/1", b"http://www.b.test/2", b"http://nx.test/3"]
        assert forward(msgs(*values), TOPICS, broker, resolver=resolver) == (3, 0)
    finally:
        resolver.close()
    placed = {item.url: (out.partition, item.ip) for out in broker.records if out.topic == TOPICS.bydomain
              for item in decode(out.value, UrlBatch).items}  # fmt: skip
    address = partition_for("10.1.1.1", TOPICS.partitions)
    assert placed == {
        "http://a.test/1": (address, "10.1.1.1"),
        "http://www.b.test/2": (address, "10.1.1.1"),
        "http://nx.test/3": (partition_for("nx.test", TOPICS.partitions), ""),  # no address: by its domain
    }


def socket_error(host: str) -> list[str]:
    raise OSError(-2, f"{host}: Name or service not known")


def test_a_failed_commit_of_routed_input_is_retried_and_never_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27: a failed synchronous commit in the embedded router ended the frontier process."""
    import threading

    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from frontier.intake import router as module

    monkeypatch.setattr(module.time, "sleep", lambda _s: None)

    class Consumer:
        def __init__(self, failures: int) -> None:
            self.failures, self.calls = failures, 0

        def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
            self.calls += 1
            if self.calls <= self.failures:
                raise KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))

    for failures, calls in ((2, 3), (10, module.COMMIT_TRIES)):
        r = module.Router.__new__(module.Router)
        r._consumer, r._stop = Consumer(failures), threading.Event()  # type: ignore[assignment]
        r._commit([TopicPartition("crawl.urls", 0, 5)])  # does not raise
        assert r._consumer.calls == calls  # type: ignore[attr-defined]
