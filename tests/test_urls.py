"""URL intake: canonical forms, registrable-domain keying, and every rejection reason."""

import ipaddress
import json
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontier.core.urls import (
    MAX_SCOPE_CHARS,
    MAX_SCOPES,
    MAX_SCOPES_CHARS,
    Rejection,
    canonicalize,
    parse_input,
    registrable_domain,
    seen_fingerprint,
)


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

    from frontier.core.urls import MAX_INPUT_BYTES, MAX_URL_LENGTH
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


# -- one spelling per server (issue 13) ------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "host", "canonical", "fetched"),
    [
        # a name: lower case and no trailing dot in the scope and the canonical URL; the fetched URL
        # keeps the dot (another Host header: a virtual host may answer it differently)
        ("http://Example.COM./a", "example.com", "http://example.com/a", "http://example.com./a"),
        ("http://example.com../a", "example.com", "http://example.com/a", "http://example.com../a"),
        (
            "http://bücher.example./",
            "xn--bcher-kva.example",
            "http://xn--bcher-kva.example/",
            "http://xn--bcher-kva.example./",
        ),
        ("http://localhost.:8080/", "localhost", "http://localhost:8080/", "http://localhost.:8080/"),
        # an IPv4 address in every form WHATWG and inet_aton read: dotted decimal everywhere
        ("http://127.0.0.1/", "127.0.0.1", "http://127.0.0.1/", "http://127.0.0.1/"),
        ("http://2130706433/", "127.0.0.1", "http://127.0.0.1/", "http://127.0.0.1/"),
        ("http://0x7F000001:8080/x", "127.0.0.1", "http://127.0.0.1:8080/x", "http://127.0.0.1:8080/x"),
        ("http://0177.0.0.1/", "127.0.0.1", "http://127.0.0.1/", "http://127.0.0.1/"),
        ("http://127.1/", "127.0.0.1", "http://127.0.0.1/", "http://127.0.0.1/"),
        ("http://0x7f.0.1/", "127.0.0.1", "http://127.0.0.1/", "http://127.0.0.1/"),
        ("http://127.0.0.1.:80/", "127.0.0.1", "http://127.0.0.1/", "http://127.0.0.1:80/"),
        ("http://0x/", "0.0.0.0", "http://0.0.0.0/", "http://0.0.0.0/"),
        (
            "http://2852039166/latest/",
            "169.254.169.254",
            "http://169.254.169.254/latest/",
            "http://169.254.169.254/latest/",
        ),
        # IPv6: compressed, lower case
        ("http://[2001:DB8:0:0::1]:8080/", "2001:db8::1", "http://[2001:db8::1]:8080/", "http://[2001:db8::1]:8080/"),
        ("http://[0:0:0:0:0:0:0:1]/", "::1", "http://[::1]/", "http://[::1]/"),
    ],
)
def test_one_spelling_per_server(raw: str, host: str, canonical: str, fetched: str) -> None:
    item = parse_input(raw.encode())
    assert (item.host, item.domain, item.canonical or item.url, item.url) == (
        host, registrable_domain(host), canonical, fetched)  # fmt: skip
    assert canonicalize(canonical) == (canonical, host)  # stable


def test_the_five_spellings_of_one_server_are_two_scopes() -> None:
    """Issue 13: example.com, example.com., and the dotted, integer and hex forms of its address
    were five scopes, all dispatched at t=0."""
    spellings = ["http://example.com/", "http://EXAMPLE.com./", "http://127.0.0.1/", "http://2130706433/",
                 "http://0x7f000001/", "http://0177.0.0.1/", "http://127.1/"]  # fmt: skip
    assert {parse_input(s.encode()).host for s in spellings} == {"example.com", "127.0.0.1"}


@pytest.mark.parametrize(
    "raw",
    ["http://1.2.3.999/", "http://256.0.0.1/", "http://1.2.3.4.5/", "http://a.1/", "http://09.0.0.1/",
     "http://0x1.0x100.0.1/", "http://4294967296/", "http://1.16777216/", "http://[fe80::1%25eth0]/"],
)  # fmt: skip
def test_a_host_that_ends_in_a_number_must_be_an_address(raw: str) -> None:
    with pytest.raises(Rejection) as exc:
        parse_input(raw.encode())
    assert str(exc.value).startswith(("invalid IPv4 address", "IPv6 zone id"))


def test_names_with_numbers_or_hex_looking_labels_stay_names() -> None:
    for raw, host in [("http://1.example.com/", "1.example.com"), ("http://foo.0x1g/", "foo.0x1g"),
                      ("http://123abc/", "123abc"), ("http://x.1a/", "x.1a")]:  # fmt: skip
        assert parse_input(raw.encode()).host == host


def _spell_part(value: int, base: str, upper: bool) -> str:
    if base == "hex":
        return ("0X" if upper else "0x") + format(value, "X" if upper else "x")
    if base == "oct":
        return "0" + format(value, "o")
    return str(value)


@given(
    address=st.integers(0, 2**32 - 1),
    parts=st.integers(1, 4),
    bases=st.lists(st.sampled_from(["dec", "hex", "oct"]), min_size=4, max_size=4),
    upper=st.booleans(),
    dot=st.booleans(),
)
def test_every_spelling_of_an_ipv4_address_is_one_host(
    address: int, parts: int, bases: list[str], upper: bool, dot: bool
) -> None:
    """Property: any 1-4 part form, any base per part (as inet_aton reads it): one host, one
    canonical URL, one fetched URL, and the address inet_aton reads."""
    octets = address.to_bytes(4, "big")
    values = [*octets[: parts - 1], int.from_bytes(octets[parts - 1 :], "big")]
    spelled = ".".join(_spell_part(v, b, upper) for v, b in zip(values, bases, strict=False))
    dotted = socket.inet_ntoa(octets)
    assert socket.inet_aton(spelled) == octets  # the form is one the C library reads as this address
    item = parse_input(f"http://{spelled}{'.' if dot else ''}:8080/p?b=1&a=2".encode())
    assert (item.host, item.domain) == (dotted, dotted)
    assert item.url == f"http://{dotted}:8080/p?b=1&a=2"
    assert item.canonical == f"http://{dotted}:8080/p?a=2&b=1"


@given(
    labels=st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True), min_size=2, max_size=4),
    upper=st.lists(st.booleans(), min_size=40, max_size=40),
    dots=st.integers(0, 2),
)
def test_every_spelling_of_a_name_is_one_host(labels: list[str], upper: list[bool], dots: int) -> None:
    """Property: case and trailing dots never make another scope or another canonical URL."""
    name = ".".join(labels)
    spelled = "".join(c.upper() if u else c for c, u in zip(name, upper + [False] * len(name), strict=False))
    item = parse_input(f"http://{spelled}{'.' * dots}/x".encode())
    assert item.host == name and (item.canonical or item.url) == f"http://{name}/x"


@given(
    words=st.lists(st.integers(0, 0xFFFF), min_size=8, max_size=8),
    upper=st.booleans(),
)
def test_every_spelling_of_an_ipv6_address_is_one_host(words: list[int], upper: bool) -> None:
    address = ipaddress.IPv6Address(b"".join(w.to_bytes(2, "big") for w in words))
    spelled = address.exploded.upper() if upper else address.exploded
    item = parse_input(f"http://[{spelled}]/".encode())
    assert item.host == address.compressed and item.url == f"http://[{address.compressed}]/"


# -- scope limits (issue 13) ------------------------------------------------------------------------
def _with_scopes(scopes: list[str]) -> bytes:
    return json.dumps({"url": "http://s.test/", "scopes": scopes}, separators=(",", ":")).encode()


def test_duplicate_scopes_collapse() -> None:
    assert parse_input(_with_scopes(["api", "api", "b", "api"] * 50)).scopes == ["api", "b"]


def test_scopes_at_the_limits_are_accepted() -> None:
    per = MAX_SCOPES_CHARS // MAX_SCOPES
    scopes = [f"{i}" + "s" * (per - 1) for i in range(MAX_SCOPES)]
    assert sum(map(len, scopes)) == MAX_SCOPES_CHARS
    assert parse_input(_with_scopes(scopes)).scopes == scopes
    assert parse_input(_with_scopes(["x" * MAX_SCOPE_CHARS])).scopes == ["x" * MAX_SCOPE_CHARS]


@pytest.mark.parametrize(
    ("scopes", "reason"),
    [
        ([f"s{i}" for i in range(MAX_SCOPES + 1)], f"too many scopes ({MAX_SCOPES + 1} > {MAX_SCOPES})"),
        ([f"{i:x}" for i in range(9000)], f"too many scopes (9000 > {MAX_SCOPES})"),  # the 63 KB submission
        (["x" * (MAX_SCOPE_CHARS + 1)], "invalid scope name"),
        ([f"{i}" + "y" * (MAX_SCOPE_CHARS - 1) for i in range(5)], "scope names too long together (320 > 256"),
        ([""], "invalid scope name"),
        (["a#b"], "invalid scope name"),
        (["a\nb"], "invalid scope name"),
        (["a\x7fb"], "invalid scope name"),
    ],
)
def test_scopes_over_the_limits_are_rejected(scopes: list[str], reason: str) -> None:
    with pytest.raises(Rejection) as exc:
        parse_input(_with_scopes(scopes))
    assert str(exc.value).startswith(reason), str(exc.value)
