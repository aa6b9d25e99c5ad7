"""Ranges every numeric setting must lie in, checked with messages that name the key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key."""


DAY = 86400.0
MONTH = 30 * DAY


@dataclass(frozen=True)
class Range:
    """The values a numeric key accepts: finite, within [lo, hi] (``(lo, hi]`` when ``lo_open``),
    integral when ``integer``. NaN and infinities never pass: NaN fails every comparison, so a
    NaN delay slipped through ``delay < 0`` and sent jobs to a host all at once."""

    lo: float
    hi: float
    lo_open: bool = False
    integer: bool = False
    why: str = ""  # said after the range when a bound has a reason worth giving

    def check(self, where: str, value: object) -> None:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and self.integer:
            ok = isinstance(value, int)
        if ok:
            v = float(value)  # type: ignore[arg-type]
            ok = math.isfinite(v) and (v > self.lo if self.lo_open else v >= self.lo) and v <= self.hi
        if not ok:
            kind = "an integer" if self.integer else "a finite number"
            low = f"> {_num(self.lo)}" if self.lo_open else f">= {_num(self.lo)}"
            why = f" ({self.why})" if self.why else ""
            raise ConfigError(f"{where}: must be {kind} {low} and <= {_num(self.hi)}{why}, got {value!r}")


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)


def _check_ranges(obj: Any, ranges: Mapping[str, Range], where: str) -> None:
    """Check the fields of the dataclass ``obj`` that ``ranges`` names (every numeric field has
    a range: tests/test_config.py checks that none is missing)."""
    for name, allowed in ranges.items():
        allowed.check(f"{where}.{name}", getattr(obj, name))


GAP = Range(0, DAY)  # seconds between two requests to one scope (also the cap of `scope set --delay`)
POSITIVE_GAP = Range(0, DAY, lo_open=True)
WINDOW = Range(0, MONTH, lo_open=True)  # a time window, seconds
CONCURRENCY = Range(1, 1000, integer=True)  # requests in flight (also the cap of `scope set --concurrency`)
PORT = Range(0, 65535, integer=True)
JITTER_MAX = 10.0  # a gap is multiplied by at most 1 + JITTER_MAX
