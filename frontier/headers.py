"""Parse the servers' rate-limit signals: ``Retry-After`` and the RateLimit header drafts.

Pure functions; ``now`` is passed in (epoch seconds). Anything malformed yields ``None`` —
a bad header never raises and never creates a gate.

- ``Retry-After`` (RFC 9110 §10.2.3): ``delay-seconds`` (``[0-9]+``, ASCII digits only) or an
  HTTP-date in any of the three formats of §5.6.7 (IMF-fixdate, obsolete RFC 850 with a
  two-digit year, asctime). Zero, negative, fractional values and past dates give no gate.
- RateLimit, all three draft generations:
  1. ``RateLimit-Limit`` / ``RateLimit-Remaining`` / ``RateLimit-Reset: N`` (draft-polli);
  2. ``RateLimit: limit=100, remaining=0, reset=5`` (draft-ietf-httpapi -03..-06);
  3. ``RateLimit: "default";r=0;t=30`` + ``RateLimit-Policy: "default";q=100;w=10`` (-07+).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

_SECONDS = re.compile(r"[0-9]+")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_IMF = re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d{2}) ([A-Z][a-z]{2}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT")
_RFC850 = re.compile(
    r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\d{2})-([A-Z][a-z]{2})-(\d{2}) "
    r"(\d{2}):(\d{2}):(\d{2}) GMT"
)
_ASCTIME = re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) (\d{4})")


def _epoch(year: int, month: str, day: int, hh: int, mm: int, ss: int) -> float | None:
    if month not in _MONTHS:
        return None
    try:
        dt = datetime(year, _MONTHS.index(month) + 1, day, hh, mm, ss, tzinfo=UTC)
    except ValueError:
        return None
    return dt.timestamp()


def http_date(value: str, now: float) -> float | None:
    """Epoch seconds of an HTTP-date in any of the three RFC 9110 formats, else None."""
    value = value.strip()
    if m := _IMF.fullmatch(value):
        day, mon, year, hh, mm, ss = m.groups()
        return _epoch(int(year), mon, int(day), int(hh), int(mm), int(ss))
    if m := _RFC850.fullmatch(value):
        day, mon, yy, hh, mm, ss = m.groups()
        # RFC 9110: a two-digit year more than 50 years in the future is in the past century.
        this_year = datetime.fromtimestamp(now, UTC).year
        year = this_year - this_year % 100 + int(yy)
        if year > this_year + 50:
            year -= 100
        return _epoch(year, mon, int(day), int(hh), int(mm), int(ss))
    if m := _ASCTIME.fullmatch(value):
        mon, day, hh, mm, ss, year = m.groups()
        return _epoch(int(year), mon, int(day.strip()), int(hh), int(mm), int(ss))
    return None


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from ``now`` per a Retry-After value, or None for no gate."""
    if value is None:
        return None
    text = value.strip()
    if _SECONDS.fullmatch(text):
        seconds = float(int(text))
        return seconds if seconds > 0 else None
    when = http_date(text, now)
    if when is None or when <= now:
        return None
    return when - now


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
    return int(text) if _SECONDS.fullmatch(text) else None


def _params(item: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in item.split(";")[1:]:
        key, sep, val = part.strip().partition("=")
        if sep:
            out[key.strip().lower()] = val.strip()
    return out


def ratelimit(headers: dict[str, str]) -> RateLimit | None:
    """Parse whichever RateLimit generation is present (lower-case header names); None if absent/malformed."""
    field = headers.get("ratelimit")
    if field is not None:
        text = field.strip()
        if "=" in text and ";" not in text.split(",", 1)[0] and not text.startswith('"'):
            # generation 2: limit=100, remaining=0, reset=5
            kv = {}
            for part in text.split(","):
                key, sep, val = part.strip().partition("=")
                if sep:
                    kv[key.strip().lower()] = val.strip()
            remaining, reset = _int(kv.get("remaining")), _int(kv.get("reset"))
            if remaining is None or reset is None:
                return None
            return RateLimit(remaining=remaining, reset=float(reset), limit=_int(kv.get("limit")))
        # generation 3: "policy";r=0;t=30 — several items possible: the most restrictive wins
        best: RateLimit | None = None
        for item in text.split(","):
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
    if remaining is None or reset is None:
        return None
    return RateLimit(remaining=remaining, reset=float(reset), limit=_int(headers.get("ratelimit-limit")))


def _policy_window(policy: str | None) -> float | None:
    if not policy:
        return None
    w = _int(_params(policy.split(",")[0]).get("w"))
    return float(w) if w else None


def gate_seconds(status: int, headers: dict[str, str], trigger: bool, now: float) -> tuple[float, str] | None:
    """How long the server asked us to stay away, and why; None when it did not.

    ``Retry-After`` is read only on trigger responses (429/503/...), never on a 200. When both
    it and a RateLimit header are present, Retry-After wins (the RateLimit draft's rule).
    """
    if trigger:
        ra = retry_after(headers.get("retry-after"), now)
        if ra is not None:
            return ra, f"Retry-After on {status}"
    rl = ratelimit(headers)
    if rl is not None and rl.remaining == 0 and rl.reset > 0:
        return rl.reset, f"RateLimit remaining=0 on {status}"
    return None
