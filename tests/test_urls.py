"""URL intake: canonical forms, registrable-domain keying, and every rejection reason."""

import pytest

from frontier.urls import Rejection, canonicalize, parse_input, registrable_domain, seen_fingerprint


@pytest.mark.parametrize(
    ("raw", "canonical", "host"),
    [
        ("HTTP://Example.COM/a?b=2&a=1#frag", "http://example.com/a?a=1&b=2", "example.com"),
        ("http://example.com:80/", "http://example.com/", "example.com"),
        ("https://example.com:443/x", "https://example.com/x", "example.com"),
        ("http://example.com:8080/x", "http://example.com:8080/x", "example.com"),
        ("http://example.com/a b", "http://example.com/a%20b", "example.com"),
        ("http://example.com/%7euser", "http://example.com/~user", "example.com"),
        ("http://bücher.example/", "http://xn--bcher-kva.example/", "xn--bcher-kva.example"),
        ("http://127.0.0.11:8000/page/1", "http://127.0.0.11:8000/page/1", "127.0.0.11"),
        ("  http://example.com/  ", "http://example.com/", "example.com"),
        # invalid percent-encoding: kept as is in the path (as browsers do), escaped in the query
        ("http://a.com/%zz", "http://a.com/%zz", "a.com"),
        ("http://a.com/%", "http://a.com/%", "a.com"),
        ("http://a.com/?q=%zz&b=1", "http://a.com/?b=1&q=%25zz", "a.com"),
        ("http://a.com/%7e%7E", "http://a.com/~~", "a.com"),
    ],
)
def test_canonicalize(raw: str, canonical: str, host: str) -> None:
    assert canonicalize(raw) == (canonical, host)
    assert canonicalize(canonical) == (canonical, host)  # a canonical form is stable


def test_equivalent_urls_share_one_canonical_form() -> None:
    forms = {canonicalize(u)[0] for u in ("http://a.com/?y=1&x=2", "HTTP://A.com:80/?x=2&y=1#top")}
    assert forms == {"http://a.com/?x=2&y=1"}


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("books.toscrape.com", "toscrape.com"),
        ("toscrape.com", "toscrape.com"),
        ("a.b.example.co.uk", "example.co.uk"),
        ("127.0.0.11", "127.0.0.11"),
        ("localhost", "localhost"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ],
)
def test_registrable_domain(host: str, domain: str) -> None:
    assert registrable_domain(host) == domain


def test_parse_bare_url_and_json() -> None:
    item = parse_input(b"http://Books.ToScrape.com/x")
    assert (item.url, item.host, item.domain, item.priority) == (
        "http://books.toscrape.com/x",
        "books.toscrape.com",
        "toscrape.com",
        0,
    )
    item = parse_input(b'{"url": "http://quotes.toscrape.com/", "priority": 5, "meta": {"k": 1}, "follow": 2}')
    assert (item.host, item.domain, item.priority, item.meta, item.follow) == (
        "quotes.toscrape.com",
        "toscrape.com",
        5,
        {"k": 1},
        2,
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "empty record"),
        (b"   ", "empty record"),
        (b"{not json", "not valid JSON"),
        (b'{"priority": 1}', "invalid submission"),
        (b'{"url": 5}', "invalid submission"),
        (b'{"url": "http://a.com/", "priority": "high"}', "invalid submission"),
        (b"ftp://example.com/file", "unsupported scheme 'ftp'"),
        (b"javascript:alert(1)", "unsupported scheme 'javascript'"),
        (b"/relative/path", "not an absolute http(s) url"),
        (b"http:///nohost", "no host"),
        (b"http://user:pw@example.com/", "credentials in url"),
        (b"http://example.com:99999/", "unparseable url"),
        (b"http://example.com/" + b"a" * 3000, "url too long"),
        (b"\xff\xfe", "not UTF-8"),
        (b"http://exa mple.com/", "whitespace inside url"),
        (b"x" * 70000, "record too large"),
    ],
)
def test_rejections_carry_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(Rejection) as exc:
        parse_input(raw)
    assert str(exc.value).startswith(reason)


@pytest.mark.parametrize(
    ("raw", "fetched"),
    [
        # the server may read repeated or ordered arguments: the order and spelling are kept
        ("http://wiki.test/index.php?title=Zeta&title=Alpha", "http://wiki.test/index.php?title=Zeta&title=Alpha"),
        ("http://a.test/page?print", "http://a.test/page?print"),
        ("http://a.test/list?sort=name&x=1#top", "http://a.test/list?sort=name&x=1"),
        ("http://bücher.example/ä", "http://xn--bcher-kva.example/%C3%A4"),
    ],
)
def test_the_url_fetched_is_the_one_given(raw: str, fetched: str) -> None:
    item = parse_input(raw.encode())
    assert item.url == fetched
    assert (item.canonical or item.url) == canonicalize(raw)[0]


def test_duplicates_are_recognised_by_the_canonical_form() -> None:
    a, b = parse_input(b"http://a.test/?y=1&x=2"), parse_input(b"HTTP://A.test:80/?x=2&y=1#top")
    assert a.url != b.url
    assert seen_fingerprint(a) == seen_fingerprint(b)


def test_the_largest_acceptable_submission_fits_every_record_that_carries_it() -> None:
    """A submission of up to MAX_INPUT_BYTES becomes a UrlItem that fits a UrlBatch record on its
    own and a Job, within the limits topics.catalog sets (so only a bug can make the router
    reject a URL as "too large after parsing")."""
    import json

    from frontier.urls import MAX_INPUT_BYTES, MAX_URL_LENGTH
    from topics.catalog import JOBS, URL_BATCH_BYTES, URLS
    from topics.schemas import Job, Submission, UrlBatch, encode

    # a URL as long as allowed once percent-encoded (6 characters per "ä"), its canonical form
    # different (sorted query), and meta filling the rest of the 64 KiB
    url = "http://big.example.com/" + "ä" * ((MAX_URL_LENGTH - 40) // 6) + "?b=1&a=2"

    def submission(meta: str) -> bytes:
        return json.dumps({"url": url, "meta": {"m": meta}, "scopes": ["s"], "follow": 1}).encode()

    raw = submission("m" * (MAX_INPUT_BYTES - len(submission(""))))
    assert len(raw) == MAX_INPUT_BYTES
    item = parse_input(raw)
    assert item.canonical and item.url != url  # the URL is there in two forms
    assert len(encode(UrlBatch(items=[item]))) <= URL_BATCH_BYTES
    assert len(encode(Job(lease="x" * 40, item=item, not_before=1.0, expires_at=2.0))) <= JOBS.produced_bytes
    follow_up = Submission(url=item.url, meta=item.meta, scopes=item.scopes, follow=3)
    assert len(encode(follow_up)) <= URLS.produced_bytes
