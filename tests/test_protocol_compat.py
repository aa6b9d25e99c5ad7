"""The current readers decode what a version-1 writer put on the wire (docs/PROTOCOL.md, "Versions").

``topics/fixtures/v1/`` holds one record of each type, written once by the version-1 code
(``topics/fixtures/make_v1.py``) and never regenerated. Each is decoded here with the current
``topics.schemas.decode`` and checked field by field against concrete values, so a field that is
renamed, dropped or read differently fails; then the decoded record is encoded and decoded again.
The fixtures are version 1 and stay so: they are checked for ``v == 1``, whatever the current
writer version is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from topics.schemas import (
    ControlCommand,
    EncodedUrlBatch,
    FeedbackBatch,
    Job,
    Page,
    Rejected,
    SchemaError,
    Status,
    Submission,
    UrlBatch,
    UrlItem,
    decode,
    encode,
)

FIXTURES = Path(__file__).resolve().parent.parent / "topics" / "fixtures" / "v1"

T = TypeVar("T", bound=msgspec.Struct)

HOST = "www.example.co.uk"
DOMAIN = "example.co.uk"
IP = "93.184.216.34"
LEASE = "5f0c2a9e1b7d4c38"
URL = "https://www.example.co.uk/shop/caf%C3%A9?id=7&a=1"
CANONICAL = "https://www.example.co.uk/shop/caf%C3%A9?a=1&id=7"
ROBOTS_URL = "https://www.example.co.uk/robots.txt"
META = {"crawl": "c-17", "depth": 2, "title": "café ☕", "tags": ["a", "b"], "nested": {"k": None, "x": 1.5}}
DATE = "Mon, 10 Jun 2024 06:13:21 GMT"


def load(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def read(data: bytes, kind: type[T]) -> T:
    """Decode with the current reader; the record survives an encode/decode round trip unchanged."""
    record = decode(data, kind)
    again = decode(encode(record), kind)
    assert again == record
    return record


def check_full_item(it: UrlItem, *, seen_commands: bool) -> None:
    """The item with every field away from its default (recrawl/forget only on the UrlBatch one)."""
    assert it.url == URL
    assert it.host == HOST
    assert it.domain == DOMAIN
    assert it.priority == 7
    assert it.meta == META
    assert it.follow == 2
    assert it.scopes == ["api", "checkout"]
    assert it.redirects == 1
    assert it.cost == 2.5
    assert it.adjust is False
    assert it.attempts == 2
    assert it.revisit == 86400.0
    assert it.canonical == CANONICAL
    assert it.recrawl is seen_commands
    assert it.forget is seen_commands
    assert it.ip == IP


def check_url_batch(data: bytes) -> None:
    batch = read(data, UrlBatch)
    assert batch.v == 1
    assert len(batch.items) == 2
    check_full_item(batch.items[0], seen_commands=True)
    plain = batch.items[1]
    assert (plain.url, plain.host, plain.domain) == ("http://blog.example.org/", "blog.example.org", "example.org")
    assert plain == UrlItem(url="http://blog.example.org/", host="blog.example.org", domain="example.org")
    assert (plain.priority, plain.meta, plain.follow, plain.scopes, plain.redirects) == (0, {}, 0, [], 0)
    assert (plain.cost, plain.adjust, plain.attempts, plain.revisit) == (1.0, True, 0, 0.0)
    assert (plain.canonical, plain.recrawl, plain.forget, plain.ip) == ("", False, False, "")
    # the frontier reads the batch with its items left encoded, then each item on its own
    encoded = decode(data, EncodedUrlBatch)
    assert encoded.v == 1
    assert [decode(bytes(raw), UrlItem) for raw in encoded.items] == batch.items


def check_job(data: bytes) -> None:
    job = read(data, Job)
    assert job.v == 1
    assert job.lease == f"{LEASE}2a"
    assert job.kind == "page"
    assert job.not_before == 1718000000.25
    assert job.expires_at == 1718000030.25
    assert job.min_gap == 1.5
    assert job.floor == 2.04
    assert job.timeout == 15.0
    assert job.retries_left == 2
    check_full_item(job.item, seen_commands=False)


def check_job_robots(data: bytes) -> None:
    job = read(data, Job)
    assert job.v == 1
    assert job.lease == f"{LEASE}2b"
    assert job.kind == "robots"
    assert job.item == UrlItem(url=ROBOTS_URL, host=HOST, domain=DOMAIN, ip=IP)
    assert (job.not_before, job.expires_at) == (1718000000.25, 1718000030.25)
    assert (job.min_gap, job.floor, job.timeout, job.retries_left) == (1.5, 0.0, 15.0, 0)


def check_feedback_batch(data: bytes) -> None:
    batch = read(data, FeedbackBatch)
    assert batch.v == 1
    assert len(batch.items) == 6
    limited, timeout, expired, retry, robots, moved = batch.items
    for fb in batch.items:
        assert (fb.host, fb.domain) == ("example.co.uk" if fb is moved else HOST, DOMAIN)

    assert limited.lease == f"{LEASE}2c"
    assert (limited.url, limited.ip, limited.outcome, limited.status) == (URL, IP, "fetched", 429)
    assert limited.latency == 0.182
    assert (limited.sent_at, limited.done_at) == (1718000001.5, 1718000001.75)
    assert limited.error == ""
    assert limited.headers == {"retry-after": "120", "date": DATE}
    assert limited.body == b""

    assert timeout.lease == f"{LEASE}2d"
    assert (timeout.url, timeout.ip, timeout.outcome, timeout.error) == (URL, IP, "error", "timeout")
    assert (timeout.status, timeout.latency) == (0, 15.0)
    assert (timeout.sent_at, timeout.done_at) == (1718000002.25, 1718000017.25)
    assert (timeout.headers, timeout.body) == ({}, b"")

    assert expired.lease == f"{LEASE}2e"
    assert (expired.url, expired.ip, expired.outcome) == (URL, IP, "expired")
    assert (expired.status, expired.latency, expired.sent_at, expired.done_at) == (0, 0.0, 0.0, 0.0)
    assert (expired.error, expired.headers, expired.body) == ("", {}, b"")

    assert retry.lease == f"{LEASE}2f"
    assert (retry.url, retry.ip, retry.outcome, retry.status) == (URL, IP, "retry", 503)
    assert (retry.latency, retry.sent_at, retry.done_at) == (0.5, 1718000003.25, 1718000004.0)
    assert (retry.error, retry.headers, retry.body) == ("", {"retry-after": "30"}, b"")

    assert robots.lease == f"{LEASE}30"
    assert (robots.url, robots.ip, robots.outcome, robots.status) == (ROBOTS_URL, IP, "fetched", 200)
    assert (robots.latency, robots.sent_at, robots.done_at) == (0.04, 1718000004.25, 1718000004.375)
    assert robots.headers == {"date": DATE}
    assert robots.body == b"User-agent: *\r\nDisallow: /private/\r\nCrawl-delay: 2\r\n"

    assert moved.lease == f"{LEASE}31"
    assert (moved.url, moved.ip, moved.outcome, moved.status) == ("http://example.co.uk/robots.txt", "", "fetched", 301)
    assert (moved.latency, moved.sent_at, moved.done_at) == (0.03, 1718000005.25, 1718000005.3125)
    assert (moved.error, moved.headers, moved.body) == ("", {"location": ROBOTS_URL}, b"")


def check_page(data: bytes) -> None:
    page = read(data, Page)
    assert page.v == 1
    assert page.url == URL
    assert page.status == 200
    assert page.outcome == "fetched"
    assert page.error == ""
    assert page.headers == {
        "content-type": "text/html; charset=iso-8859-1",
        "content-length": "5242881",
        "x-robots-tag": "noarchive",
    }
    # Latin-1, a NUL, bytes that are no UTF-8 at all, and a UTF-8 character: the bytes as they came
    assert page.body == (
        b"<html><head><title>Caf\xe9</title></head><body>\x00\xff\xfe caf\xe9 \xe2\x98\x95</body></html>"
    )
    assert page.truncated is True
    assert page.content_type == "text/html; charset=iso-8859-1"
    assert page.fetched_at == 1718000001.5
    assert page.latency == 0.125
    assert page.meta == META
    assert page.worker == "crawler-3-4711"


def check_page_disallowed(data: bytes) -> None:
    page = read(data, Page)
    assert page.v == 1
    assert page.url == "https://www.example.co.uk/private/x"
    assert (page.outcome, page.error, page.status) == ("disallowed", "disallowed by robots.txt", 0)
    assert (page.headers, page.body, page.truncated, page.content_type) == ({}, b"", False, "")
    assert (page.fetched_at, page.latency, page.meta, page.worker) == (1718000006.25, 0.0, {"crawl": "c-17"}, "")


def check_submission(data: bytes) -> None:
    sub = read(data, Submission)
    assert not hasattr(sub, "v")  # a submission carries no version
    assert sub.url == "https://www.example.co.uk/start"
    assert sub.priority == 3
    assert sub.meta == META
    assert sub.follow == 1
    assert sub.scopes == ["api"]
    assert sub.redirects == 2
    assert sub.cost == 0.5
    assert sub.autothrottle is False
    assert sub.revisit == 3600.0
    assert sub.recrawl is True
    assert sub.forget is True


def check_control(data: bytes) -> None:
    cmd = read(data, ControlCommand)
    assert cmd.v == 1  # v1 wrote no "v" here (its default is omitted): it must still read as 1
    assert (cmd.action, cmd.scope, cmd.delay, cmd.concurrency) == ("set", "example.co.uk#api", 2.5, 3)
    cmd.validate()


def check_rejected(data: bytes) -> None:
    rej = read(data, Rejected)
    whole = b'\xef\xbb\xbf{"url": "https://example.com/' + b"a" * 5000 + b'\xff"}'
    assert rej.v == 1
    assert rej.reason == "not valid JSON: invalid character (byte 0)"
    assert rej.original == whole[:4096]
    assert (rej.topic, rej.partition, rej.offset) == ("crawl.urls", 3, 123456)
    assert rej.original_length == len(whole) == 5035
    assert rej.original_sha256 == hashlib.sha256(whole).hexdigest()
    assert rej.truncated is True


def check_status(data: bytes) -> None:
    status = read(data, Status)
    assert status.v == 1
    assert (status.instance, status.at, status.partitions) == ("frontier-a-1", 1718000005.25, [0, 3, 5])
    assert status.totals == {"queued": 1200, "inflight": 8, "completed": 50000, "pages_per_s": 12}
    assert len(status.scopes) == 1
    row = status.scopes[0]
    assert (row.scope, row.queued, row.inflight, row.delay, row.concurrency) == (HOST, 40, 2, 1.5, 2)
    assert (row.gate_until, row.backoff, row.reason) == (1718000120.25, 2.0, "gate: Retry-After 120s")
    assert (row.wait_until, row.sent, row.limit) == (1718000120.25, 1234, 4.8)
    assert row.cause == "limit ≈ 4.80 req/s from 429"


CHECKS: dict[str, Callable[[bytes], None]] = {
    "url_batch.json": check_url_batch,
    "job.json": check_job,
    "job_robots.json": check_job_robots,
    "feedback_batch.json": check_feedback_batch,
    "page.json": check_page,
    "page_disallowed.json": check_page_disallowed,
    "submission.json": check_submission,
    "control.json": check_control,
    "rejected.json": check_rejected,
    "status.json": check_status,
}


def test_every_fixture_is_checked() -> None:
    assert sorted(p.name for p in FIXTURES.iterdir() if p.suffix == ".json") == sorted(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_v1_record_decodes_with_the_current_reader(name: str) -> None:
    CHECKS[name](load(name))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_fixture_is_the_exact_bytes_of_one_record(name: str) -> None:
    data = load(name)
    assert data[:1] == b"{" and data[-1:] == b"}"  # one object, no trailing newline
    assert msgspec.json.encode(msgspec.json.decode(data)) == data  # compact, as msgspec writes it


def test_fields_are_read_by_name_not_by_position() -> None:
    """The v1 Job writer put ``item`` third; the current one puts it last: both read the same."""
    data = load("job.json")
    assert data.index(b'"item":') < data.index(b'"not_before":')
    assert decode(encode(decode(data, Job)), Job) == decode(data, Job)


def test_unknown_fields_are_ignored() -> None:
    """A newer writer's extra field does not stop an older reader (docs/PROTOCOL.md, "Versions")."""
    data = load("feedback_batch.json")
    extended = data.replace(b'"outcome":"expired"', b'"outcome":"expired","hint":{"x":[1,2]}', 1)
    assert extended != data
    assert decode(extended, FeedbackBatch) == decode(data, FeedbackBatch)


# (fixture, field as written, a broken spelling, what must fail: a defaulted field decodes to its
# default and a value check fails; a required one fails the decode)
BREAKS = [
    ("url_batch.json", b'"adjust":', b'"autothrottle":'),
    ("url_batch.json", b'"ip":', b'"address":'),
    ("job.json", b'"retries_left":', b'"retries":'),
    ("job.json", b'"not_before":', b'"notBefore":'),
    ("job_robots.json", b'"kind":', b'"type":'),
    ("feedback_batch.json", b'"outcome":', b'"result":'),
    ("feedback_batch.json", b'"sent_at":', b'"sent":'),
    ("feedback_batch.json", b'"body":', b'"content":'),
    ("page.json", b'"status":', b'"code":'),
    ("page.json", b'"body":', b'"content":'),
    ("page_disallowed.json", b'"outcome":', b'"result":'),
    ("submission.json", b'"autothrottle":', b'"adjust":'),
    ("control.json", b'"delay":', b'"gap":'),
    ("rejected.json", b'"original_length":', b'"length":'),
    ("status.json", b'"wait_until":', b'"until":'),
    ("page.json", b'"v":1', b'"v":9'),  # an unknown version is refused, never guessed at
]


@pytest.mark.parametrize(("name", "field", "broken"), BREAKS, ids=[f"{n}:{f.decode()}" for n, f, _ in BREAKS])
def test_a_broken_field_name_fails_the_check(tmp_path: Path, name: str, field: bytes, broken: bytes) -> None:
    data = load(name)
    assert field in data
    copy = tmp_path / name
    copy.write_bytes(data.replace(field, broken, 1))
    with pytest.raises((AssertionError, SchemaError)):
        CHECKS[name](copy.read_bytes())


def test_a_reinterpreted_value_fails_the_check(tmp_path: Path) -> None:
    """The same field name with another meaning (bytes read as text, not base64) is caught too."""
    data = load("page.json")
    body = msgspec.json.decode(data, type=dict[str, Any])["body"]
    copy = tmp_path / "page.json"
    copy.write_bytes(data.replace(body.encode(), b"PGh0bWw-", 1))  # base64url, not the standard alphabet
    with pytest.raises(SchemaError):
        check_page(copy.read_bytes())
