"""Revisit intervals that follow change (pure: no clock, no I/O).

A URL's revisit is either fixed (``revisit`` seconds after each fetch) or *adaptive*, within bounds
``[lo, hi]``: each fetch tells whether the page changed since the previous one (a 304, the same
validators or the same content digest: unchanged), and the interval shrinks when it changed
(times ``SHRINK``) and grows when it did not (times ``GROW``), as Nutch's and StormCrawler's adaptive
schedules do: halved after a change, doubled without. An interval then settles where half the
revisits find a change (``p·ln SHRINK + (1-p)·ln GROW = 0``): for a page changing at random at rate
λ, about ln 2 / λ = 0.69 / λ, so a change waits about a third of the page's mean change interval to
be seen, and a page that never changes is asked about twice as rarely each time, up to the bound.

The first interval: half the page's age when its response says when it last changed
(``Last-Modified``, or a sitemap's ``lastmod``; a page's age is its mean change interval's best
guess), else a quarter of the way up the bounds in log scale (near the lower bound: learning a
fast page costs two halvings, a static one doubles away).
"""

from __future__ import annotations

from datetime import UTC
from email.utils import parsedate_to_datetime

GROW = 2.0  # unchanged: the next interval this much longer
SHRINK = 0.5  # changed: this much shorter
AGE_SHARE = 0.5  # the first interval: this share of the page's age (Last-Modified)...
# ...else this far up the bounds in log scale: a page of unknown change is looked at again soon (a
# page changing often is then seen at once) and a page that does not change doubles away from it
# (measured: from the bounds' geometric mean, pages changing every 10 s waited minutes to be learned)
START = 0.25
ADAPTIVE = (3600.0, 30 * 86400.0)  # ``"revisit": "adaptive"``: from an hour to 30 days
MAX_INTERVAL = 1e9  # seconds: any interval, fixed or a bound, stays under this
MAX_VALIDATOR_CHARS = 256  # an ETag or Last-Modified kept longer than this is not kept (bytes bounded)


def bounds(spec: object) -> tuple[float, float] | None:
    """The adaptive bounds a submission's ``revisit`` asks for (``"adaptive"`` or ``[lo, hi]``
    seconds, 0 < lo <= hi < 1e9); None for a fixed interval (a number). ValueError with the
    reason for anything else."""
    if isinstance(spec, bool):
        raise ValueError('invalid revisit: seconds, "adaptive" or [min, max] seconds')
    if isinstance(spec, int | float):
        if not 0 <= spec < MAX_INTERVAL:
            raise ValueError("invalid revisit interval (0 to 1e9 seconds)")
        return None
    if spec == "adaptive":
        return ADAPTIVE
    if isinstance(spec, list | tuple) and len(spec) == 2 and all(type(v) in (int, float) for v in spec):
        lo, hi = float(spec[0]), float(spec[1])
        if 0 < lo <= hi < MAX_INTERVAL:
            return lo, hi
        raise ValueError("invalid revisit bounds: [min, max] seconds, 0 < min <= max < 1e9")
    raise ValueError('invalid revisit: seconds, "adaptive" or [min, max] seconds')


def spec_of(value: object) -> float | str | list[float]:
    """A revisit as a person writes it (a command line, a setting): seconds, ``"adaptive"``,
    ``"MIN:MAX"`` seconds, or ``[min, max]``; the submission's form, or ValueError with the reason."""
    spec: object = value
    if isinstance(value, str):
        text = value.strip()
        try:
            spec = text if text == "adaptive" else [float(v) for v in text.split(":")] if ":" in text else float(text)
        except ValueError:
            raise ValueError(f"invalid revisit {value[:50]!r}: seconds, 'adaptive' or MIN:MAX seconds") from None
    elif isinstance(value, list | tuple):
        spec = list(value)
    bounds(spec)
    return spec  # type: ignore[return-value]


def first_interval(lo: float, hi: float, age: float | None = None) -> float:
    """The first interval of an adaptive revisit: half the page's ``age`` when known, else a quarter
    of the way up the bounds in the factors' log scale, ``lo * (hi / lo) ** START``; within the
    bounds."""
    if age is not None and age >= 0:
        return clamp(AGE_SHARE * age, lo, hi)
    return clamp(lo * (hi / lo) ** START, lo, hi)


def next_interval(current: float, lo: float, hi: float, changed: bool) -> float:
    """The interval after a fetch that found the page ``changed`` (or not), within the bounds."""
    return clamp(current * (SHRINK if changed else GROW), lo, hi)


def clamp(value: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, value))


def age_of(last_modified: str, at: float) -> float | None:
    """Seconds from an HTTP-date ``last_modified`` to ``at`` (epoch seconds); None when it does
    not parse or lies in the future (a wrong clock tells nothing)."""
    if not last_modified:
        return None
    try:
        parsed = parsedate_to_datetime(last_modified)
        when = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()  # "-0000": UTC too
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return at - when if when <= at else None
