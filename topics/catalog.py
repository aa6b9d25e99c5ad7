"""The topics of a crawl, as code: each owns its name, key, partitioning, cleanup policy and
record size limit.

Names take an optional prefix (``<prefix>crawl.urls``) so that several crawls, or several test
runs, can share one broker. Creating them on a broker (idempotent) and checking that existing
topics accept the largest records the crawl produces on them (``max.message.bytes``) is
``topics.admin``: ``crawl-frontier topics create`` prints its answer, and processes check at
start-up.

Record sizes. Every producer allows records of up to :data:`PRODUCER_MAX_BYTES`
(``message.max.bytes`` in ``topics.kafka.producer_conf``); a broker refuses a record over
its topic's ``max.message.bytes`` (1 MiB by default). Each topic is created with an explicit
limit, and each knows the largest record our code puts on it (``produced_bytes``):

- records that carry one URL (a submission, a job, a follow-up) are small: a submission is at
  most 64 KiB (``frontier.core.urls.MAX_INPUT_BYTES``);
- the router cuts ``UrlBatch`` records at :data:`URL_BATCH_BYTES`;
- ``Rejected`` keeps a 4 KiB prefix of the original (``topics.schemas.REJECTED_ORIGINAL_BYTES``);
- pages carry a body of up to ``worker.max_body_bytes`` (base64 in JSON), which the
  configuration caps at :data:`MAX_PAGE_BODY_BYTES` so that a page fits :data:`PAGES_MAX_BYTES`;
- feedback batches are bounded by count, not bytes, and may carry robots.txt bodies: any batch
  the producer accepts must be accepted.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

DEFAULT_CRAWL = "default"  # as topics.schemas.DEFAULT_CRAWL (this module imports nothing of ours)
_PLAIN_CRAWL = re.compile(r"[a-z0-9-]{1,64}")


def crawl_token(crawl: str) -> str:
    """The part of a topic or group name that stands for a crawl other than the default one: the
    name itself when it is lower-case letters, digits and ``-`` (``books``), else a slug of it and
    a digest of the whole name after a dot (``team-a-books.1f3a9c0e``), so that every crawl name
    (any characters, see ``topics.schemas.valid_crawl``) gives a legal, distinct topic name. A
    plain token has no dot and a digested one has one: the two forms never meet, and no token has
    ``_``, which Kafka takes for ``.`` when it compares topic names."""
    if _PLAIN_CRAWL.fullmatch(crawl):
        return crawl
    slug = re.sub(r"[^a-z0-9-]+", "-", crawl.lower()).strip("-")[:40] or "crawl"
    return f"{slug}.{hashlib.blake2b(crawl.encode(), digest_size=4).hexdigest()}"


KiB = 1024
MiB = 1024 * KiB

# The producers' message.max.bytes (topics.kafka.producer_conf; a test checks they agree):
# no topic needs a larger limit, since no record larger than this is ever sent.
PRODUCER_MAX_BYTES = 16 * MiB
# Kafka's framing around one record (batch header, record header) and its key (at most a URL).
RECORD_OVERHEAD = 4 * KiB
# A record that carries one URL: a submission (at most 64 KiB, frontier.core.urls.MAX_INPUT_BYTES),
# a follow-up, a Job (one UrlItem: the submission's meta plus the URL in two forms).
ONE_URL_BYTES = 2 * 64 * KiB + RECORD_OVERHEAD
# The router keeps every UrlBatch record under this many encoded bytes (frontier/intake/router.py), a
# quarter of the topic's 1 MiB: far from the limit, still thousands of plain URLs per record.
URL_BATCH_BYTES = 256 * KiB
# crawl.pages: the largest topic limit the producers allow.
PAGES_MAX_BYTES = PRODUCER_MAX_BYTES
# Everything on a Page but its body: response headers (aiohttp refuses more than 128 header
# lines of 8 KiB, so at most 1 MiB, up to 2 MiB as UTF-8 JSON), the submission's meta (64 KiB),
# the URL and framing. A page whose headers are even larger is refused by the broker; the
# worker then publishes a small error page instead.
PAGE_OVERHEAD_BYTES = 3 * MiB
# The largest body a page may carry (base64 in JSON: 4 bytes per 3) so that it fits the pages
# topic with its headers: the cap of worker.max_body_bytes (frontier/config.py), 9.75 MiB.
MAX_PAGE_BODY_BYTES = (PAGES_MAX_BYTES - PAGE_OVERHEAD_BYTES) // 4 * 3


def page_record_bytes(max_body_bytes: int) -> int:
    """The largest ``crawl.pages`` record a worker with this body cap produces."""
    return 4 * -(-max_body_bytes // 3) + PAGE_OVERHEAD_BYTES


@dataclass(frozen=True)
class TopicSpec:
    base: str
    key: str
    doc: str
    compacted: bool = False
    internal: bool = False
    partitions: int | None = None  # None: the crawl's partition count
    max_message_bytes: int = MiB  # the topic's max.message.bytes, set when it is created
    produced_bytes: int = MiB  # the largest record the crawl produces on it: the least limit that works


# Each limit below is set explicitly at creation (never the broker's default), and is at least
# the largest record produced on the topic (produced_bytes, what check_limits requires).
URLS = TopicSpec(
    "crawl.urls", "none (any)", "user input: URL strings or JSON submissions",
    # 1 MiB: the router accepts submissions of up to 64 KiB; a larger record up to this limit
    # is rejected with a reason on crawl.rejected (bounded), a record over it is refused to the
    # producer that sent it (FrontierClient.submit raises) instead of entering the crawl.
    max_message_bytes=MiB, produced_bytes=ONE_URL_BYTES,
)  # fmt: skip
BYDOMAIN = TopicSpec(
    "crawl.urls.bydomain", "no key; partition = murmur2(ip or registrable domain)", "router → frontier", internal=True,
    # 1 MiB: four times the router's UrlBatch bound (URL_BATCH_BYTES), which a test checks
    max_message_bytes=MiB, produced_bytes=URL_BATCH_BYTES + RECORD_OVERHEAD,
)  # fmt: skip
JOBS = TopicSpec(
    "crawl.jobs", "host", "frontier → workers: leased fetch jobs",
    # 1 MiB: a Job is one URL and its lease
    max_message_bytes=MiB, produced_bytes=ONE_URL_BYTES,
)  # fmt: skip
FEEDBACK = TopicSpec(
    "crawl.feedback", "no key; partition = murmur2(ip or registrable domain)", "workers → frontier: fetch results",
    # 16 MiB: a FeedbackBatch is bounded by count, not bytes, and robots.txt results carry the
    # file (up to 500 KiB, 683 KB as base64): whatever the workers' producer accepts must pass
    max_message_bytes=PRODUCER_MAX_BYTES, produced_bytes=PRODUCER_MAX_BYTES,
)  # fmt: skip
PAGES = TopicSpec(
    "crawl.pages", "url", "output: fetched pages",
    # 16 MiB: a page body of up to worker.max_body_bytes (capped at MAX_PAGE_BODY_BYTES) with
    # its headers; check_limits requires page_record_bytes(max_body_bytes)
    max_message_bytes=PAGES_MAX_BYTES, produced_bytes=page_record_bytes(MAX_PAGE_BODY_BYTES),
)  # fmt: skip
REJECTED = TopicSpec(
    "crawl.rejected", "none", "input that could not be accepted, with the reason",
    # 1 MiB: a Rejected keeps a 4 KiB prefix of the original and a reason of at most 1000
    # characters (topics.schemas), some 12 KB as JSON
    max_message_bytes=MiB, produced_bytes=32 * KiB,
)  # fmt: skip
CONTROL = TopicSpec(
    "crawl.control", "scope; to every partition (ip: scopes: to one)",
    "operators → frontier: pause/resume/drop/set a scope",
    # 1 MiB: a ControlCommand is a scope name (at most 253 characters) and two numbers
    max_message_bytes=MiB, produced_bytes=16 * KiB,
)  # fmt: skip
STATE = TopicSpec(
    "crawl.frontier.state", "state key", "changelog of the frontier's RocksDB state", compacted=True, internal=True,
    # 4 MiB: a host's robots.txt answer is stored whole (up to 500 KiB, about 700 KB as JSON),
    # queued URLs and leases are one URL each; room to spare over the 1 MiB they need
    max_message_bytes=4 * MiB, produced_bytes=MiB,
)  # fmt: skip
STATUS = TopicSpec(
    "crawl.frontier.status", "frontier instance id", "latest status snapshot of each frontier instance",
    compacted=True, internal=True, partitions=1,
    # 1 MiB: a snapshot holds totals, at most a few hundred scope rows and 1,000 crawl rows
    # (topics.schemas.MAX_STATUS_CRAWLS, a few hundred bytes each at most)
    max_message_bytes=MiB, produced_bytes=768 * KiB,
)  # fmt: skip

REPLIES = TopicSpec(
    "crawl.replies", "the asking URLFrontier gateway; partition = murmur2(gateway id)",
    "frontier → URLFrontier gateways: answers to their queries", internal=True,
    # 4 MiB: a Reply holds at most topics.schemas.MAX_QUERY_LIMIT URL records, cut at 256 KiB of
    # their bytes (frontier.partition.recorded.REPLY_BUDGET) plus the last one (a URL's metadata)
    max_message_bytes=4 * MiB, produced_bytes=256 * KiB + ONE_URL_BYTES,
)  # fmt: skip

ALL: tuple[TopicSpec, ...] = (URLS, BYDOMAIN, JOBS, FEEDBACK, PAGES, REJECTED, CONTROL, STATE, STATUS, REPLIES)
# Topics whose partition numbers must agree: a domain's URLs, feedback and state live in one partition.
COPARTITIONED: tuple[TopicSpec, ...] = (BYDOMAIN, FEEDBACK, CONTROL, STATE)


@dataclass(frozen=True)
class Topics:
    """Resolved topic names for one crawl."""

    prefix: str = ""
    partitions: int = 8
    replication: int = 1

    def name(self, spec: TopicSpec) -> str:
        return f"{self.prefix}{spec.base}"

    @property
    def urls(self) -> str:
        return self.name(URLS)

    @property
    def bydomain(self) -> str:
        return self.name(BYDOMAIN)

    @property
    def jobs(self) -> str:
        return self.name(JOBS)

    def jobs_of(self, crawl: str) -> str:
        """The jobs topic of a crawl: ``crawl.jobs`` for the default crawl, ``crawl.jobs.<token>``
        for another (:func:`crawl_token`), made when the crawl first appears (``topics.admin``)."""
        return self.jobs if crawl == DEFAULT_CRAWL else f"{self.jobs}.{crawl_token(crawl)}"

    @property
    def feedback(self) -> str:
        return self.name(FEEDBACK)

    @property
    def pages(self) -> str:
        return self.name(PAGES)

    @property
    def rejected(self) -> str:
        return self.name(REJECTED)

    @property
    def control(self) -> str:
        return self.name(CONTROL)

    @property
    def state(self) -> str:
        return self.name(STATE)

    @property
    def status(self) -> str:
        return self.name(STATUS)

    @property
    def replies(self) -> str:
        return self.name(REPLIES)


def workers_group(app_id: str, crawl: str = DEFAULT_CRAWL) -> str:
    """The consumer group of a crawl's workers: ``<app_id>-workers`` for the default crawl,
    ``<app_id>-workers.<token>`` for another (:func:`crawl_token`)."""
    base = f"{app_id}-workers"
    return base if crawl == DEFAULT_CRAWL else f"{base}.{crawl_token(crawl)}"


def needed_bytes(spec: TopicSpec, max_body_bytes: int | None = None) -> int:
    """The least ``max.message.bytes`` that ``spec``'s topic needs: its largest record. For
    ``crawl.pages`` that depends on the workers' ``max_body_bytes`` (None: the largest allowed)."""
    if spec.base == PAGES.base and max_body_bytes is not None:
        return page_record_bytes(max_body_bytes)
    return spec.produced_bytes
