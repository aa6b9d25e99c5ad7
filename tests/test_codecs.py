"""Every schema round-trips through the one codec; foreign versions and shapes are refused."""

import msgspec
import pytest

from topics.schemas import (
    EncodedJob,
    EncodedUrlBatch,
    Feedback,
    FeedbackBatch,
    Job,
    Page,
    Rejected,
    SchemaError,
    UrlBatch,
    UrlItem,
    decode,
    encode,
)

ITEM = UrlItem(url="http://a.test/", host="a.test", domain="a.test", priority=3, meta={"x": [1]}, follow=1)


@pytest.mark.parametrize(
    "msg",
    [
        UrlBatch(items=[ITEM, ITEM]),
        Job(lease="l1", item=ITEM, not_before=1.5, expires_at=31.5, min_gap=1.0, retries_left=2),
        FeedbackBatch(
            items=[
                Feedback(
                    lease="l1",
                    host="a.test",
                    domain="a.test",
                    url=ITEM.url,
                    outcome="fetched",
                    status=429,
                    latency=0.25,
                    sent_at=1.6,
                    headers={"retry-after": "5"},
                )
            ]
        ),
        Page(url=ITEM.url, status=200, headers={"content-type": "text/html"}, body=b"\x00\xffbinary", fetched_at=2.0),
        Rejected(reason="no host", original=b"\xff\xfe", topic="crawl.urls", partition=1, offset=7),
    ],
)
def test_round_trip(msg: object) -> None:
    assert decode(encode(msg), type(msg)) == msg  # type: ignore[arg-type]


def test_unknown_version_is_refused() -> None:
    data = encode(Page(url="http://a.test/")).replace(b'"v":1', b'"v":4')
    with pytest.raises(SchemaError, match="unsupported schema version 4"):
        decode(data, Page)


@pytest.mark.parametrize("data", [b"", b"not json", b"{}", b'{"v":1,"items":"x"}', b"[1,2]"])
def test_malformed_is_refused(data: bytes) -> None:
    with pytest.raises(SchemaError):
        decode(data, UrlBatch)


def test_rejected_keeps_a_bounded_prefix_with_the_length_and_digest_of_the_whole() -> None:
    """A Rejected carried the whole original: ~800 KB of input made a record over 1 MiB."""
    import hashlib

    from topics.catalog import REJECTED as REJECTED_TOPIC
    from topics.schemas import REJECTED_ORIGINAL_BYTES

    big = bytes(range(256)) * 4096  # 1 MiB
    rej = Rejected(reason="r" * 5000, original=big, topic="crawl.urls", partition=2, offset=9)
    assert rej.original == big[:REJECTED_ORIGINAL_BYTES] and rej.truncated
    assert rej.original_length == len(big) and rej.original_sha256 == hashlib.sha256(big).hexdigest()
    assert len(rej.reason) <= 1000
    assert decode(encode(rej), Rejected) == rej
    assert len(encode(rej)) < REJECTED_TOPIC.produced_bytes
    small = Rejected(reason="no host", original=b"x")
    assert not small.truncated and small.original_length == 1
    minimal = rej.minimal("too big to say")
    assert (minimal.original, minimal.original_length, minimal.original_sha256) == (b"", len(big), rej.original_sha256)
    assert (minimal.topic, minimal.partition, minimal.offset) == ("crawl.urls", 2, 9)


def test_rejected_records_from_before_the_digest_still_decode() -> None:
    import hashlib

    old = b'{"v":1,"reason":"no host","original":"aGVsbG8=","topic":"crawl.urls","partition":0,"offset":3}'
    rej = decode(old, Rejected)
    assert rej.original == b"hello" and rej.original_length == 5
    assert rej.original_sha256 == hashlib.sha256(b"hello").hexdigest()


def test_a_job_written_with_its_item_spliced_in_decodes_as_the_job() -> None:
    """The frontier writes jobs as ``EncodedJob`` (the item's queued bytes, not encoded again):
    every field a worker reads comes out as from an encoded ``Job``."""
    job = Job(lease="l1", kind="robots", item=ITEM, not_before=1.5, expires_at=31.5, min_gap=1.0, floor=2.0,
              timeout=9.0, retries_left=2)  # fmt: skip
    terms = {f: getattr(job, f) for f in job.__struct_fields__ if f != "item"}
    spliced = encode(EncodedJob(item=msgspec.Raw(encode(ITEM)), **terms))
    assert decode(spliced, Job) == job
    assert [bytes(raw) for raw in decode(encode(UrlBatch(items=[ITEM, ITEM])), EncodedUrlBatch).items] == [
        encode(ITEM)
    ] * 2
