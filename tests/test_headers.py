"""Hostile rate-limit headers (issue 11 item 1) and Retry-After dates on the server's clock (item 13).

No header value may raise: a bad one would stop feedback processing for its whole partition.
"""

import math
import time
from datetime import UTC, datetime
from email.utils import formatdate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier.core.headers import HUGE, MAX_ITEMS, RateLimit, gate_seconds, http_date, ratelimit, retry_after

NOW = datetime(2026, 8, 21, 12, 0, 0, tzinfo=UTC).timestamp()
D309 = "9" * 309  # float(int(...)) overflows
D5000 = "7" * 5000  # int(...) refuses more than 4,300 digits
NAMES = ["retry-after", "date", "ratelimit", "ratelimit-policy", "ratelimit-remaining", "ratelimit-reset",
         "ratelimit-limit"]  # fmt: skip


def imf(ts: float) -> str:
    return formatdate(ts, usegmt=True)


# -- item 1: absurd numbers -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (D309, float(HUGE)),
        (D5000, float(HUGE)),
        (f" {D5000} ", float(HUGE)),
        ("0" * 5000, None),  # zero, however long
        ("0" * 5000 + "7", 7.0),  # leading zeros are not significant
        ("9999999999", 9999999999.0),  # ten digits: parsed exactly (epoch times have ten)
        ("10000000000", float(HUGE)),  # eleven: clamped
        ("999999999", 999999999.0),
    ],
)
def test_retry_after_long_digit_strings(value: str, seconds: float | None) -> None:
    assert retry_after(value, NOW) == seconds


@pytest.mark.parametrize("digits", [D309, D5000])
@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "{d}"},
        {"ratelimit-remaining": "0", "ratelimit-reset": "{d}"},
        {"ratelimit": '"default";r=0;t={d}'},
        {"ratelimit": "limit=100, remaining=0, reset={d}"},
        {"ratelimit": '"default";r=0', "ratelimit-policy": '"default";q=100;w={d}'},
    ],
)
def test_huge_numbers_give_a_huge_finite_gate(digits: str, headers: dict[str, str]) -> None:
    filled = {k: v.format(d=digits) for k, v in headers.items()}
    assert gate_seconds(429, filled, True, NOW) == (float(HUGE), "Retry-After on 429" if "retry-after" in filled
                                                    else "RateLimit remaining=0 on 429")  # fmt: skip


@pytest.mark.parametrize("digits", [D309, D5000])
def test_huge_remaining_and_limit_are_clamped(digits: str) -> None:
    assert ratelimit({"ratelimit-remaining": digits, "ratelimit-reset": "5", "ratelimit-limit": digits}) == RateLimit(
        remaining=HUGE, reset=5.0, limit=HUGE
    )
    assert ratelimit({"ratelimit": f'"default";r={digits};t=5'}) == RateLimit(remaining=HUGE, reset=5.0)
    assert gate_seconds(200, {"ratelimit": f'"default";r={digits};t=5'}, False, NOW) is None


def test_megabyte_ratelimit_field_looks_at_the_first_items_only() -> None:
    """100k items: only the first MAX_ITEMS count, so the work is bounded (and the answer too)."""
    field = '"a";r=5;t=10, ' * 100_000 + '"b";r=0;t=30'
    assert len(field) > 1_000_000
    started = time.monotonic()
    assert ratelimit({"ratelimit": field}) == RateLimit(remaining=5, reset=10.0)
    assert gate_seconds(429, {"ratelimit": field}, True, NOW) is None
    assert time.monotonic() - started < 5.0  # linear, small constant (generous for a loaded machine)
    within = '"a";r=5;t=10, ' * (MAX_ITEMS - 1) + '"b";r=0;t=30'
    assert ratelimit({"ratelimit": within}) == RateLimit(remaining=0, reset=30.0)


def test_megabyte_item_with_many_parameters() -> None:
    item = '"a"' + ";x=1" * 200_000 + ";r=0;t=30"
    assert ratelimit({"ratelimit": item}) is None  # r and t are past the parameters considered
    assert ratelimit({"ratelimit": '"a";r=0;t=30' + ";x=1" * 200_000}) == RateLimit(remaining=0, reset=30.0)


@pytest.mark.parametrize("value", ["Fri, 21 Aug 2026 12:02:00 GMT" + " " * 1_000_000, "x" * 1_000_000,
                                   "Fri, \u0662\u0661 Aug 2026 12:02:00 GMT"])  # fmt: skip
def test_long_or_non_ascii_dates_are_not_dates(value: str) -> None:
    assert http_date(value, NOW) is None or value.strip() == "Fri, 21 Aug 2026 12:02:00 GMT"
    assert retry_after(value, NOW) in (None, 120.0)


def test_rfc850_with_an_unusable_clock() -> None:
    for now in (math.inf, -math.inf, math.nan, 1e300, -1e300):
        assert http_date("Friday, 21-Aug-26 12:01:00 GMT", now) is None
        assert retry_after("Friday, 21-Aug-26 12:01:00 GMT", now) is None
        if not math.isfinite(now):
            assert retry_after("Fri, 21 Aug 2026 12:02:00 GMT", now) is None
    assert retry_after("Fri, 21 Aug 2026 12:02:00 GMT", -1e300) == float(HUGE)


# -- item 13: an HTTP-date is the server's clock ---------------------------------------------------
@pytest.mark.parametrize("skew", [30.0, -30.0, 0.0, 3600.0, -3600.0])
def test_retry_after_date_is_relative_to_the_response_date(skew: float) -> None:
    server_now = NOW + skew
    headers = {"retry-after": imf(server_now + 60), "date": imf(server_now)}
    assert retry_after(headers["retry-after"], NOW, headers["date"]) == 60.0
    assert gate_seconds(503, headers, True, NOW) == (60.0, "Retry-After on 503")


def test_server_30s_ahead_gives_a_60s_gate() -> None:
    headers = {"retry-after": "Fri, 21 Aug 2026 12:01:30 GMT", "date": "Fri, 21 Aug 2026 12:00:30 GMT"}
    assert gate_seconds(429, headers, True, NOW) == (60.0, "Retry-After on 429")


@pytest.mark.parametrize(
    ("date", "seconds"),
    [
        (None, 120.0),  # no Date: the frontier's clock
        ("garbage", 120.0),  # invalid Date: the frontier's clock
        ("", 120.0),
        ("Fri, 21 Aug 2026 12:03:00 GMT", None),  # the server says its gate is already over
        ("Fri, 21 Aug 2026 12:02:00 GMT", None),
        ("Friday, 21-Aug-26 12:01:00 GMT", 60.0),  # any of the three formats
        ("Fri Aug 21 12:01:30 2026", 30.0),
    ],
)
def test_retry_after_date_fallbacks(date: str | None, seconds: float | None) -> None:
    assert retry_after("Fri, 21 Aug 2026 12:02:00 GMT", NOW, date) == seconds


def test_date_header_does_not_change_delay_seconds() -> None:
    assert retry_after("60", NOW, imf(NOW + 3600)) == 60.0
    assert gate_seconds(429, {"retry-after": "60", "date": imf(NOW - 3600)}, True, NOW) == (60.0, "Retry-After on 429")


# -- properties: nothing raises, everything is finite and non-negative ------------------------------
digits = st.text(alphabet="0123456789", min_size=1, max_size=6000) | st.integers(300, 6000).map(lambda n: "9" * n)
number = st.integers(min_value=0, max_value=10**12).map(str) | digits
timestamps = st.integers(min_value=int(NOW) - 10**6, max_value=int(NOW) + 10**6)
dates = (
    timestamps.map(imf)
    | timestamps.map(lambda ts: datetime.fromtimestamp(ts, UTC).strftime("%A, %d-%b-%y %H:%M:%S GMT"))
    | timestamps.map(lambda ts: datetime.fromtimestamp(ts, UTC).strftime("%a %b %e %H:%M:%S %Y"))
)
values = (
    st.text(max_size=120)
    | number
    | dates
    | st.builds(lambda r, t: f'"p";r={r};t={t}', number, number)
    | st.builds(lambda r, t: f"limit=10, remaining={r}, reset={t}", number, number)
    | st.builds(lambda q, w: f'"p";q={q};w={w}', number, number)
)
headers = st.dictionaries(st.sampled_from(NAMES), values, max_size=7) | st.dictionaries(
    st.text(max_size=10), values, max_size=4
)
clocks = st.floats(allow_nan=True, allow_infinity=True) | st.just(NOW)


def finite_non_negative(x: float) -> bool:
    return math.isfinite(x) and x >= 0


@settings(max_examples=300)
@given(values, clocks, st.none() | values)
def test_retry_after_never_raises(value: str, now: float, date: str | None) -> None:
    result = retry_after(value, now, date)
    assert result is None or (finite_non_negative(result) and result > 0)


@settings(max_examples=300)
@given(values, clocks)
def test_http_date_never_raises(value: str, now: float) -> None:
    result = http_date(value, now)
    assert result is None or math.isfinite(result)


@settings(max_examples=300)
@given(headers)
def test_ratelimit_never_raises(h: dict[str, str]) -> None:
    rl = ratelimit(h)
    assert rl is None or (
        0 <= rl.remaining <= HUGE and finite_non_negative(rl.reset) and (rl.limit is None or 0 <= rl.limit <= HUGE)
    )


@settings(max_examples=300)
@given(st.integers(0, 999), headers, st.booleans(), clocks)
def test_gate_seconds_never_raises(status: int, h: dict[str, str], trigger: bool, now: float) -> None:
    gate = gate_seconds(status, h, trigger, now)
    assert gate is None or (finite_non_negative(gate[0]) and gate[0] > 0 and isinstance(gate[1], str))


def test_workers_forward_every_header_the_parser_reads() -> None:
    """One list: a header the throttling reads is forwarded by the workers (frontier/core/headers.py
    names both), so adding a signal touches that module only."""
    import re
    from pathlib import Path

    from frontier.core import headers as module

    source = Path(module.__file__).read_text()
    read = set(re.findall(r'headers\.get\("([a-z-]+)"', source))
    assert read and read <= set(module.THROTTLE_HEADERS), sorted(read - set(module.THROTTLE_HEADERS))
