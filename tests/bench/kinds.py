"""A benchmark fleet with sites of every kind (THROTTLING.md v2 §3-4, §9), served from a child
process: the behaviours of ``tests/integration/hidden_sites.py`` on ``127.<octet>.x.y`` hosts,
``sites_per_kind`` of each. Each site judges the crawler from its own log; :func:`per_kind`
sums the judgement up per kind: share of the allowance, 429 share, violations.

Kinds: a token bucket answering a bare 429, with Retry-After in seconds, with an HTTP-date; a
fixed window publishing RateLimit, or X-RateLimit; robots.txt Crawl-delay; a 503 outage; latency
that grows with load; seed 003's staged daily quota.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from frontier.demo.sites import Site
from tests.bench.fleet import ChildFleet
from tests.integration.hidden_sites import HiddenLimitFleet, Limits

WARMUP = 10.0  # seconds after a site's first page before its rate is judged


def limits_of(kind: str) -> Limits:
    return {
        "bucket": Limits("bucket", rate=4.0, burst=4.0),
        "retry_after_seconds": Limits("retry_after_seconds", rate=4.0, burst=4.0),
        "retry_after_date": Limits("retry_after_date", rate=4.0, burst=4.0),
        "ratelimit": Limits("ratelimit", quota=20, window=5.0),
        "xratelimit": Limits("xratelimit", quota=20, window=5.0),
        "robots": Limits("robots", crawl_delay=0.5),
        "outage": Limits("outage", outage=(3.0, 13.0)),
        "latency": Limits("latency"),
        "daily_quota": Limits("daily_quota", quota=40, window=20.0),
    }[kind]


KINDS = ("bucket", "retry_after_seconds", "retry_after_date", "ratelimit", "xratelimit", "robots", "outage",
         "latency", "daily_quota")  # fmt: skip


@dataclass(frozen=True)
class KindsSpec:
    sites_per_kind: int = 10
    pages: int = 100
    second_octet: int = 11
    kinds: tuple[str, ...] = KINDS


class KindsFleet(HiddenLimitFleet):
    def __init__(self, spec: KindsSpec) -> None:
        limits = [limits_of(kind) for kind in spec.kinds for _ in range(spec.sites_per_kind)]
        super().__init__(limits)
        hosts = [f"127.{spec.second_octet}.{1 + i // 200}.{1 + i % 200}" for i in range(len(limits))]
        self.sites = [Site(host=h, pages=spec.pages, latency=0.02) for h in hosts]
        self.limits = {h: lim for h, lim in zip(hosts, limits, strict=True)}
        self.pages = spec.pages

    def urls(self) -> list[str]:
        out = []
        for s in self.sites:
            out += [s.url(self.port, f"/page/{i}") for i in range(self.pages)]
            if self.limits[s.host].kind == "robots":
                out.append(s.url(self.port, "/private/1"))
        return out

    def per_kind(self) -> dict[str, dict[str, Any]]:
        """Per kind: mean share of the allowance after the warm-up (sites with a known allowance),
        429 share, requests inside announced windows, gaps under Crawl-delay, disallowed fetched."""
        out: dict[str, dict[str, Any]] = {}
        for kind in dict.fromkeys(lim.kind for lim in self.limits.values()):
            shares, requests, n429, inside, under, disallowed = [], 0, 0, 0, 0, 0
            smallest: float | None = None
            for s in self.sites:
                lim = self.limits[s.host]
                if lim.kind != kind:
                    continue
                hits = [h for h in s.hits if h.path != "/robots.txt"]
                requests += len(hits)
                n429 += sum(1 for h in hits if h.status == 429)
                inside += len(lim.gate_violations)
                disallowed += len(lim.disallowed_fetched)
                if lim.crawl_delay:
                    starts = sorted(h.start for h in hits)
                    gaps = [b - a for a, b in itertools.pairwise(starts)]
                    under += sum(1 for g in gaps if g < lim.crawl_delay)
                    if gaps:
                        smallest = min(gaps) if smallest is None else min(smallest, *gaps)
                allowed = lim.rate or (lim.quota / lim.window if kind in ("ratelimit", "xratelimit") else 0.0)
                judged = [h for h in hits if h.start >= lim.first_page + WARMUP]
                if allowed and len(judged) > 10:
                    span = judged[-1].start - judged[0].start
                    ok = sum(1 for h in judged if h.status == 200)
                    shares.append(ok / span / allowed if span else 0.0)
            out[kind] = {
                "share_of_allowance": round(sum(shares) / len(shares), 3) if shares else None,
                "ratio_429": round(n429 / max(1, requests), 4),
                "inside_windows": inside,
                "under_crawl_delay": under,
                "smallest_gap": round(smallest, 4) if smallest is not None else None,
                "disallowed_fetched": disallowed,
                "requests": requests,
            }
        return out


def _serve(spec: KindsSpec, conn: Connection) -> None:
    fleet = KindsFleet(spec)
    fleet.start()
    conn.send((fleet.port, fleet.urls()))
    conn.recv()  # "report"
    conn.send(fleet.per_kind())
    fleet.stop()


class KindsProcess(ChildFleet):
    """A :class:`KindsFleet` in a child process: ``urls`` at start, ``report()`` per kind at the end."""

    def __init__(self, spec: KindsSpec) -> None:
        super().__init__(_serve, spec)

    def report(self) -> dict[str, dict[str, Any]]:
        report: dict[str, dict[str, Any]] = super().report()
        return report
