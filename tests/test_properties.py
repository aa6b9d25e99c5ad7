"""Property-based tests: parsers never raise on hostile input, and round trips hold."""

from datetime import UTC, datetime
from email.utils import formatdate

from hypothesis import given, settings
from hypothesis import strategies as st

from frontier.core.headers import http_date, ratelimit, retry_after
from frontier.core.robots import RobotsRecord, Rules
from frontier.core.urls import Rejection, canonicalize, parse_input
from topics.schemas import (
    Feedback,
    FeedbackBatch,
    Job,
    Page,
    Rejected,
    ScopeStatus,
    Status,
    UrlBatch,
    UrlItem,
    decode,
    encode,
)

NOW = datetime(2026, 8, 21, 12, 0, 0, tzinfo=UTC).timestamp()
header_text = st.text(max_size=80) | st.sampled_from(["0", "7", " 7 ", "-1", "1e3", "Fri, 21 Aug 2026 12:02:00 GMT"])


@given(header_text)
def test_retry_after_never_raises_and_is_positive_or_none(value: str) -> None:
    result = retry_after(value, NOW)
    assert result is None or result > 0


@given(st.integers(min_value=1, max_value=10**9))
def test_retry_after_seconds(n: int) -> None:
    assert retry_after(str(n), NOW) == float(n)


@given(st.integers(min_value=int(NOW) - 10**8, max_value=int(NOW) + 10**8))
def test_imf_fixdate_round_trip(ts: int) -> None:
    assert http_date(formatdate(ts, usegmt=True), NOW) == float(ts)


@given(st.dictionaries(st.sampled_from(["ratelimit", "ratelimit-policy", "ratelimit-remaining", "ratelimit-reset",
                                        "ratelimit-limit"]), header_text))  # fmt: skip
def test_ratelimit_never_raises(headers: dict[str, str]) -> None:
    rl = ratelimit(headers)
    assert rl is None or (rl.remaining >= 0 and rl.reset >= 0)


@given(st.binary(max_size=300))
def test_parse_input_accepts_or_rejects_never_crashes(raw: bytes) -> None:
    try:
        item = parse_input(raw)
    except Rejection as exc:
        assert str(exc)
    else:
        assert item.url.startswith(("http://", "https://")) and item.host


urls = st.builds(
    lambda scheme, host, path, query: f"{scheme}://{host}/{path}{'?' + query if query else ''}",
    st.sampled_from(["http", "https", "HTTP"]),
    st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?\.(com|org|co\.uk|example)", fullmatch=True),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30),
    st.text(alphabet="abc=&%20xyz", max_size=20),
)


@settings(max_examples=300)
@given(urls)
def test_canonicalisation_is_idempotent(url: str) -> None:
    try:
        canonical, host = canonicalize(url)
    except Rejection:
        return
    assert canonicalize(canonical) == (canonical, host)


@given(st.binary(max_size=2000))
def test_robots_rules_never_raise(body: bytes) -> None:
    rules = Rules(RobotsRecord(status=200, body=body), "testbot")
    assert isinstance(rules.allowed("http://a.test/x"), bool)
    assert rules.delay() >= 0


@given(st.text(max_size=50), st.integers(-(2**31), 2**31 - 1), st.dictionaries(st.text(max_size=5), st.integers()))
def test_codec_round_trip(text: str, priority: int, meta: dict[str, int]) -> None:
    item = UrlItem(url="http://a.test/" + text, host="a.test", domain="a.test", priority=priority, meta=meta)
    assert decode(encode(item), UrlItem) == item
    page = Page(url=item.url, body=text.encode(), meta=meta)
    assert decode(encode(page), Page) == page


items = st.builds(
    UrlItem,
    url=st.text(max_size=40),
    host=st.text(max_size=20),
    domain=st.text(max_size=20),
    priority=st.integers(-(2**31), 2**31 - 1),
    follow=st.integers(0, 5),
    scopes=st.lists(st.text(max_size=8)),
    cost=st.floats(0, 1e6),
    attempts=st.integers(0, 10),
)
floats = st.floats(allow_nan=False, allow_infinity=False)
feedback = st.builds(
    Feedback,
    lease=st.text(max_size=32),
    host=st.text(max_size=20),
    domain=st.text(max_size=20),
    url=st.text(max_size=40),
    outcome=st.sampled_from(["fetched", "error", "retry", "expired"]),
    status=st.integers(0, 999),
    latency=floats,
    sent_at=floats,
    error=st.text(max_size=10),
    headers=st.dictionaries(st.text(max_size=10), st.text(max_size=20)),
    body=st.binary(max_size=50),
)
messages = st.one_of(
    st.builds(UrlBatch, items=st.lists(items, max_size=3)),
    st.builds(
        Job,
        lease=st.text(max_size=32),
        kind=st.sampled_from(["page", "robots"]),
        item=items,
        not_before=floats,
        expires_at=floats,
        min_gap=floats,
        timeout=floats,
        retries_left=st.integers(0, 9),
    ),
    st.builds(FeedbackBatch, items=st.lists(feedback, max_size=3)),
    st.builds(
        Rejected,
        reason=st.text(max_size=30),
        original=st.binary(max_size=100),
        topic=st.text(max_size=10),
        partition=st.integers(-1, 100),
        offset=st.integers(-1, 2**40),
    ),
    st.builds(
        Status,
        instance=st.text(max_size=10),
        at=floats,
        partitions=st.lists(st.integers(0, 64)),
        totals=st.dictionaries(st.text(max_size=8), st.integers()),
        scopes=st.lists(
            st.builds(
                ScopeStatus,
                scope=st.text(max_size=10),
                queued=st.integers(0),
                inflight=st.integers(0),
                delay=floats,
                concurrency=st.integers(1),
                gate_until=floats,
                backoff=floats,
                reason=st.text(max_size=10),
                wait_until=st.none() | floats,
            ),
            max_size=2,
        ),
    ),
)


@given(messages)
def test_every_message_type_round_trips(msg: object) -> None:
    assert decode(encode(msg), type(msg)) == msg  # type: ignore[arg-type]


@given(st.binary(max_size=20_000), st.text(max_size=3000), st.text(max_size=249))
def test_a_rejected_record_is_bounded_whatever_it_rejects(original: bytes, reason: str, topic: str) -> None:
    """The Rejected of any input fits crawl.rejected (it used to carry the whole original)."""
    import hashlib

    from topics.catalog import REJECTED as REJECTED_TOPIC

    rej = Rejected(reason=reason, original=original, topic=topic, partition=3, offset=2**40)
    assert len(encode(rej)) <= REJECTED_TOPIC.produced_bytes
    assert original.startswith(rej.original) and rej.original_length == len(original)
    assert rej.original_sha256 == hashlib.sha256(original).hexdigest()
    assert decode(encode(rej), Rejected) == rej


@given(st.lists(st.integers(1, 3000), max_size=60), st.integers(100, 5000), st.integers(1, 10))
def test_packed_url_batches_respect_the_bound_keep_the_order_and_lose_nothing(
    sizes: list[int], max_bytes: int, max_items: int
) -> None:
    from frontier.intake.router import batch_record, pack

    entries = [(b"x" * n, i) for i, n in enumerate(sizes)]
    records, too_big = pack(entries, max_bytes=max_bytes, max_items=max_items)
    carried = [tag for _, tags in records for tag in tags]
    assert sorted(carried + too_big) == list(range(len(sizes)))
    assert carried == sorted(carried)
    for value, tags in records:
        assert 0 < len(tags) <= max_items and len(value) <= max_bytes
        assert value == batch_record([entries[t][0] for t in tags])
    assert all(len(batch_record([entries[t][0]])) > max_bytes for t in too_big)
