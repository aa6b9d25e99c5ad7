"""Parse the servers' rate-limit signals: ``Retry-After`` and the RateLimit header drafts.

Pure functions; ``now`` is passed in (epoch seconds). Anything malformed yields ``None`` —
a bad header never raises and never creates a gate.

- ``Retry-After`` (RFC 9110 §10.2.3): ``delay-seconds`` (``[0-9]+``, ASCII digits only) or an
  HTTP-date in any of the three formats of §5.6.7 (IMF-fixdate, obsolete RFC 850 with a
  two-digit year, asctime). Zero, negative, fractional values and past dates give no gate.
  An HTTP-date is the server's clock: when the response carries a valid ``Date`` header, the
  wait is (Retry-After - Date), so a skewed frontier clock neither shortens nor lengthens it.
- RateLimit, all three draft generations:
  1. ``RateLimit-Limit`` / ``RateLimit-Remaining`` / ``RateLimit-Reset: N`` (draft-polli);
  2. ``RateLimit: limit=100, remaining=0, reset=5`` (draft-ietf-httpapi -03..-06);
  3. ``RateLimit: "default";r=0;t=30`` + ``RateLimit-Policy: "default";q=100;w=10`` (-07+).

Hostile values are bounded: a number with more than :data:`MAX_DIGITS` significant digits
counts as :data:`HUGE` (so is any larger value: callers cap gates with ``gate_max``), and at
most :data:`MAX_ITEMS` list members and :data:`MAX_PARAMS` parameters per member are looked at,
so the work per header is linear in its length with a small constant.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

# The response headers a worker forwards in feedback: what this module reads. Adding a signal is
# a parser here plus its name in this list. ``date`` is the server's clock: an HTTP-date
# Retry-After is read against it.
THROTTLE_HEADERS = (
    "retry-after",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "date",
)

HUGE = 10**10  # seconds or requests (or an epoch time): any number above this, or longer than MAX_DIGITS, is this
MAX_DIGITS = 10  # significant digits parsed exactly; int() of 4,300+ digits raises, float() of 309+
MAX_ITEMS = 64  # list members of one RateLimit / RateLimit-Policy field considered
MAX_PARAMS = 16  # parameters of one member considered
MAX_DATE = 64  # longer than any HTTP-date (29 characters); longer values are not dates

_SECONDS = re.compile(r"[0-9]+")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_IMF = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d{2}) ([A-Z][a-z]{2}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT", re.ASCII
)
_RFC850 = re.compile(
    r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\d{2})-([A-Z][a-z]{2})-(\d{2}) "
    r"(\d{2}):(\d{2}):(\d{2}) GMT",
    re.ASCII,
)
_ASCTIME = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) (\d{4})", re.ASCII
)


def _number(digits: str) -> int:
    """The value of an ASCII digit string, at most :data:`HUGE`; never raises, never slow."""
    significant = digits.lstrip("0")
    if len(significant) > MAX_DIGITS:
        return HUGE
    return min(int(significant or "0"), HUGE)


def _items(text: str) -> list[str]:
    """The first :data:`MAX_ITEMS` comma-separated members (an unsplit remainder is dropped)."""
    return text.split(",", MAX_ITEMS)[:MAX_ITEMS]


def _epoch(year: int, month: str, day: int, hh: int, mm: int, ss: int) -> float | None:
    if month not in _MONTHS:
        return None
    try:
        dt = datetime(year, _MONTHS.index(month) + 1, day, hh, mm, ss, tzinfo=UTC)
    except ValueError:
        return None
    return dt.timestamp()


def _this_year(now: float) -> int | None:
    try:
        return datetime.fromtimestamp(now, UTC).year
    except (OverflowError, OSError, ValueError):
        return None


def http_date(value: str, now: float) -> float | None:
    """Epoch seconds of an HTTP-date in any of the three RFC 9110 formats, else None."""
    if len(value) > 4 * MAX_DATE:
        return None
    value = value.strip()
    if len(value) > MAX_DATE:
        return None
    if m := _IMF.fullmatch(value):
        day, mon, year, hh, mm, ss = m.groups()
        return _epoch(int(year), mon, int(day), int(hh), int(mm), int(ss))
    if m := _RFC850.fullmatch(value):
        day, mon, yy, hh, mm, ss = m.groups()
        # RFC 9110: a two-digit year more than 50 years in the future is in the past century.
        this_year = _this_year(now)
        if this_year is None:
            return None
        year = this_year - this_year % 100 + int(yy)
        if year > this_year + 50:
            year -= 100
        if year < 1:
            return None
        return _epoch(year, mon, int(day), int(hh), int(mm), int(ss))
    if m := _ASCTIME.fullmatch(value):
        mon, day, hh, mm, ss, year = m.groups()
        return _epoch(int(year), mon, int(day.strip()), int(hh), int(mm), int(ss))
    return None


def retry_after(value: str | None, now: float, date: str | None = None) -> float | None:
    """Seconds to wait per a Retry-After value, or None for no gate.

    An HTTP-date is measured from the response's ``Date`` header when that is a valid
    HTTP-date (both are the server's clock), else from ``now`` (the frontier's clock).
    """
    if value is None:
        return None
    text = value.strip()
    if _SECONDS.fullmatch(text):
        seconds = float(_number(text))
        return seconds if seconds > 0 else None
    when = http_date(text, now)
    if when is None:
        return None
    # Date has one-second resolution: it is the origin only when the two clocks disagree by more
    # than that (the frontier reads the result later than the server wrote it, by the transit).
    origin = now
    stated = http_date(date, now) if date is not None else None
    if stated is not None and math.isfinite(stated) and not -1.0 <= now - stated <= 2.0:
        origin = stated
    if not math.isfinite(origin) or when <= origin:
        return None
    return min(when - origin, float(HUGE))


@dataclass(frozen=True, slots=True)
class RateLimit:
    """What a RateLimit header says: ``remaining`` requests within ``reset`` seconds."""

    remaining: int
    reset: float
    limit: int | None = None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    return _number(text) if _SECONDS.fullmatch(text) else None


def _params(item: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in item.split(";", MAX_PARAMS + 1)[1 : MAX_PARAMS + 1]:
        key, sep, val = part.strip().partition("=")
        if sep:
            out[key.strip().lower()] = val.strip()
    return out


def ratelimit(headers: dict[str, str], now: float | None = None) -> RateLimit | None:
    """Parse whichever RateLimit generation is present (lower-case header names), or else the
    de-facto ``X-RateLimit-*``; None if absent/malformed. ``now`` reads an X-RateLimit-Reset
    given as an epoch time."""
    field = headers.get("ratelimit")
    if field is not None:
        text = field.strip()
        items = _items(text)
        if "=" in text and ";" not in items[0] and not text.startswith('"'):
            # generation 2: limit=100, remaining=0, reset=5
            kv = {}
            for part in items:
                key, sep, val = part.strip().partition("=")
                if sep:
                    kv[key.strip().lower()] = val.strip()
            remaining, reset = _int(kv.get("remaining")), _int(kv.get("reset"))
            if remaining is None or reset is None:
                return None
            return RateLimit(remaining=remaining, reset=float(reset), limit=_int(kv.get("limit")))
        # generation 3: "policy";r=0;t=30 — several items possible: the most restrictive wins
        best: RateLimit | None = None
        for item in items:
            if not item.strip().startswith('"'):
                continue
            params = _params(item)
            remaining, reset = _int(params.get("r")), _int(params.get("t"))
            if remaining is None:
                continue
            rl = RateLimit(remaining=remaining, reset=float(reset or 0))
            if best is None or (rl.remaining, -rl.reset) < (best.remaining, -best.reset):
                best = rl
        if best is not None and best.reset == 0:
            quota = _policy_window(headers.get("ratelimit-policy"))
            best = RateLimit(remaining=best.remaining, reset=quota or 0.0)
        return best
    # generation 1: RateLimit-Remaining + RateLimit-Reset
    remaining = _int(headers.get("ratelimit-remaining"))
    reset = _int(headers.get("ratelimit-reset"))
    if remaining is not None and reset is not None:
        return RateLimit(remaining=remaining, reset=float(reset), limit=_int(headers.get("ratelimit-limit")))
    return _x_ratelimit(headers, now)


def _x_ratelimit(headers: dict[str, str], now: float | None) -> RateLimit | None:
    """``X-RateLimit-Remaining`` + ``X-RateLimit-Reset``, used by many public APIs (GitHub, Twitter,
    ...): the reset is seconds, or an epoch time when larger than a day's seconds (THROTTLING.md §4)."""
    remaining = _int(headers.get("x-ratelimit-remaining"))
    reset = _int(headers.get("x-ratelimit-reset"))
    if remaining is None or reset is None:
        return None
    seconds = float(reset)
    if seconds > 86400:
        if now is None or not seconds > now:
            return None
        seconds -= now
    return RateLimit(remaining=remaining, reset=seconds, limit=_int(headers.get("x-ratelimit-limit")))


def _policy_window(policy: str | None) -> float | None:
    if not policy:
        return None
    w = _int(_params(policy.split(",", 1)[0]).get("w"))
    return float(w) if w else None


def gate_seconds(status: int, headers: dict[str, str], trigger: bool, now: float) -> tuple[float, str] | None:
    """How long the server asked us to stay away, and why; None when it did not.

    ``Retry-After`` is read only on trigger responses (429/503/...), never on a 200; an
    HTTP-date there is measured from the response's ``Date`` header (key ``"date"``) when
    valid. When both it and a RateLimit header are present, Retry-After wins (the RateLimit
    draft's rule).
    """
    if trigger:
        ra = retry_after(headers.get("retry-after"), now, headers.get("date"))
        if ra is not None:
            return ra, f"Retry-After on {status}"
    rl = ratelimit(headers, now)
    if rl is not None and rl.remaining == 0 and rl.reset > 0:
        return rl.reset, f"RateLimit remaining=0 on {status}"
    return None
