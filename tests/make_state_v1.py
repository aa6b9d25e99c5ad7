"""State fixture of layout version 1: one partition's store, as the pre-"crawls" code writes it.

Written once by the version-1 code; never regenerate with a later version: this is what a
version-1 frontier left in its RocksDB database and on ``crawl.frontier.state``. A later test
loads ``state_v1/partition.json`` into a fresh store, rebuilds a ``PartitionFrontier`` over it
with the current code, and checks the ``expected`` section (queues, leases, done and revisit
URLs, overrides, counters); ``state_v1/changelog.json`` is the same state as the changelog
records that produced it, in write order (a restore from the changelog must give the same).

It was made from the version-1 tree (the commit before the store layout gained crawls), not from
the working tree::

    git worktree add <v1 checkout> <v1 commit>
    cd <v1 checkout> && PYTHONPATH=<v1 checkout> python <this file> --out topics/fixtures/state_v1

(kept under ``tests/``: it imports the frontier, which ``topics`` may not; it was run from
``topics/fixtures/`` at commit 29d73cf, the last commit before crawls)

The run is deterministic (a fixed clock, a fixed random generator, a fixed lease prefix): two runs
write the same bytes. The crawl it models (partition 1 of the default 8, the shipped default
configuration, robots.txt obeyed and answered):

- ``www.example.com``: five URLs (one with priority 5, one with ``revisit`` 3600 s, one with
  ``meta`` and a query that canonicalises differently) and a duplicate spelling of one;
- ``api.example.org``: two URLs in the named scope ``api`` (queue ``api.example.org\\x1fexample.org#api``);
- ``blog.example.fr``: two URLs; the host is paused by an operator before its pages dispatch;
- robots.txt fetched for the three origins (200 with a Crawl-delay, 200, 404);
- one page fetched (done), the revisit URL fetched (waiting in ``V``), one page lease in flight,
  the rest queued; an operator's ``set`` of a delay on ``example.org#api`` and a ``pause`` of
  ``blog.example.fr``; the input offsets of the records applied (``I<role>``) and the counters (``C``).

Encoding of the files: keys as lowercase hex (hex strings sort as the bytes do), values as
standard base64, a tombstone as ``null``; ``key_text`` / ``value_text`` are for reading only.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

from frontier.config import FrontierConfig, ThrottleConfig
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input, seen_fingerprint
from frontier.partition import SEEN_DONE, SEEN_OPEN, SEEN_REVISIT, PartitionFrontier, read_seen
from frontier.partition import keys as layout
from frontier.partition.records import item_dec, lease_dec, override_dec, robots_dec, stats_dec
from topics import schemas
from topics.partitioning import partition_for
from topics.schemas import ControlCommand, EncodedUrlBatch, Feedback, Job, UrlBatch, UrlItem

NOW = 1_700_000_000.0  # the injected clock's start: 2023-11-14 22:13:20 UTC
PARTITIONS = 8  # the default partition count (topics.catalog): every domain below is in partition 1
PARTITION = 1
SEED = 20231114
LEASE_PREFIX = "5f0c2a9e1b7d4c38"  # otherwise os.urandom per incarnation: fixed so the lease ids are
USER_AGENT = "kafka-crawl-frontier"  # PartitionFrontier's default

# the submissions, as crawl.urls records (the router turns each into a UrlItem)
SUBMISSIONS = [
    b'{"url": "https://www.example.com/news", "revisit": 3600}',
    b'{"url": "https://www.example.com/important", "priority": 5}',
    b'"https://www.example.com/"',
    b'"https://www.example.com/page/1"',
    b'{"url": "https://www.example.com/about?b=2&a=1",'
    b' "meta": {"crawl": "c-1", "depth": 1, "title": "caf\\u00e9 \\u2615"}}',
    b'{"url": "https://api.example.org/v1/items?page=1", "scopes": ["api"]}',
    b'{"url": "https://api.example.org/v1/items?page=2", "scopes": ["api"]}',
    b'"https://blog.example.fr/post/1"',
    b'"https://blog.example.fr/post/2"',
    b'"HTTPS://WWW.EXAMPLE.COM:443/"',  # a duplicate of https://www.example.com/
]
ROBOTS = {  # origin -> (status, body)
    "https://www.example.com": (200, b"User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n"),
    "https://api.example.org": (200, b"User-agent: *\nAllow: /\n"),
    "https://blog.example.fr": (404, b""),
}
CONTROLS = [
    ControlCommand(action="set", scope="example.org#api", delay=5.0),
    ControlCommand(action="pause", scope="blog.example.fr"),
]
# input offsets recorded with what each record changed (I<role>), as the service does
URLS_OFFSET, FEEDBACK_OFFSET, CONTROL_OFFSET = 100, 200, 300


class Log:
    """The frontier's changelog hook: every (key, value or None) in write order."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def __call__(self, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))


def _key_text(key: bytes) -> str:
    return key.decode("ascii", "backslashreplace")


def _value_text(value: bytes) -> str | None:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _record(key: bytes, value: bytes | None) -> dict[str, str | None]:
    """A store entry or a changelog record (``value`` None: a tombstone) as written to the files."""
    return {
        "key": key.hex(),
        "value": None if value is None else _b64(value),
        "key_text": _key_text(key),
        "value_text": None if value is None else _value_text(value),
    }


def _feedback(job: Job, sent_at: float, done_at: float, status: int, body: bytes = b"") -> Feedback:
    i = job.item
    return Feedback(lease=job.lease, host=i.host, domain=i.domain, ip=i.ip, url=i.url, outcome="fetched",
                    status=status, latency=round(done_at - sent_at, 3), sent_at=sent_at, done_at=done_at,
                    body=body)  # fmt: skip


def _by_url(jobs: list[Job]) -> dict[str, Job]:
    return {j.item.url: j for j in jobs}


def build() -> tuple[PartitionFrontier, MemoryKV, Log, dict[str, Any]]:
    """Drive a version-1 partition through the crawl the module doc describes."""
    kv, log = MemoryKV(), Log()
    settings, throttle = FrontierConfig(), ThrottleConfig()  # the shipped defaults: robots_obey is on
    assert settings.robots_obey
    f = PartitionFrontier(PARTITION, kv, settings, throttle, log, user_agent=USER_AGENT, rng=random.Random(SEED))
    f.lease_ids.prefix = LEASE_PREFIX  # os.urandom otherwise: lease ids would differ per run
    f.seen._sweep_slice = 0  # no sweep runs here; fixed anyway
    steps: list[str] = []

    # t+0: one crawl.urls batch, through the service's path (items encoded by the router, stored as they are)
    items = [parse_input(raw) for raw in SUBMISSIONS]
    assert {partition_for(i.domain, PARTITIONS) for i in items} == {PARTITION}
    record = schemas.encode(UrlBatch(items=items))
    encoded = [bytes(raw) for raw in schemas.decode(record, EncodedUrlBatch).items]
    decoded = [schemas.decode(raw, UrlItem) for raw in encoded]
    t = NOW
    accepted = f.ingest(decoded, t, encoded)
    assert accepted == len(SUBMISSIONS) - 1 and f.stats.duplicates == 1, (accepted, f.stats)
    f.note_input("u", URLS_OFFSET)
    f.save_stats()
    steps.append(f"t={t}: ingest {len(SUBMISSIONS)} submissions ({accepted} queued, 1 duplicate), I u={URLS_OFFSET}")

    # t+0: dispatch: a robots.txt job per origin, no page yet
    out = f.dispatch(t)
    robots_jobs = {layout_origin(j): j for j in out.jobs}
    assert all(j.kind == "robots" for j in out.jobs) and set(robots_jobs) == set(ROBOTS), out.jobs
    f.save_stats()
    steps.append(f"t={t}: dispatch: robots.txt jobs {sorted((j.lease, j.item.url) for j in out.jobs)}")

    # t+1: the robots.txt answers, one crawl.frontier.feedback batch
    t = NOW + 1.0
    for site, (status, body) in ROBOTS.items():
        job = robots_jobs[site]
        assert f.feedback(_feedback(job, job.not_before + 0.1, job.not_before + 0.3, status, body), t)
    f.note_input("f", FEEDBACK_OFFSET)
    f.save_stats()
    answers = ", ".join(f"{site}: {status}" for site, (status, _) in ROBOTS.items())
    steps.append(f"t={t}: feedback: robots.txt answered {{{answers}}}, I f={FEEDBACK_OFFSET}")

    # t+2: operators' commands on crawl.control
    t = NOW + 2.0
    for n, cmd in enumerate(CONTROLS):
        cmd.validate()
        assert f.control(cmd, t) == 0
        f.note_input("c", CONTROL_OFFSET + n)
    f.save_stats()
    commands = [msgspec.to_builtins(c) for c in CONTROLS]
    steps.append(f"t={t}: control: {commands}, I c={CONTROL_OFFSET + len(CONTROLS) - 1}")

    # t+5: pages: the highest priority URL of www.example.com and the api scope's first; blog paused
    t = NOW + 5.0
    out = f.dispatch(t)
    jobs = _by_url(out.jobs)
    assert set(jobs) == {"https://www.example.com/important", "https://api.example.org/v1/items?page=1"}, list(jobs)
    assert all(j.kind == "page" for j in out.jobs) and not out.reports
    f.save_stats()
    steps.append(f"t={t}: dispatch: pages {sorted((j.lease, j.item.url) for j in out.jobs)}")
    api_job = jobs["https://api.example.org/v1/items?page=1"]

    # t+6: the important page is fetched: done
    t = NOW + 6.0
    job = jobs["https://www.example.com/important"]
    assert f.feedback(_feedback(job, t - 0.8, t - 0.5, 200), t)
    f.note_input("f", FEEDBACK_OFFSET + 1)
    f.save_stats()
    steps.append(f"t={t}: feedback: {job.lease} fetched (200), I f={FEEDBACK_OFFSET + 1}")

    # t+10: the next www.example.com URL, the revisit one (the api scope is full, blog paused)
    t = NOW + 10.0
    out = f.dispatch(t)
    assert [j.item.url for j in out.jobs] == ["https://www.example.com/news"], out.jobs
    f.save_stats()
    job = out.jobs[0]
    steps.append(f"t={t}: dispatch: pages {[(j.lease, j.item.url) for j in out.jobs]}")

    # t+11: it is fetched: waits in V for its revisit
    t = NOW + 11.0
    assert f.feedback(_feedback(job, t - 0.7, t - 0.4, 200), t)
    f.note_input("f", FEEDBACK_OFFSET + 2)
    f.save_stats()
    steps.append(f"t={t}: feedback: {job.lease} fetched (200): revisit due t+3600, I f={FEEDBACK_OFFSET + 2}")
    steps.append(f"left: {api_job.lease} ({api_job.item.url}) in flight, the other URLs queued")
    return f, kv, log, {"steps": steps, "end": t}


def layout_origin(job: Job) -> str:
    """The origin of a robots.txt job."""
    return job.item.url.removesuffix("/robots.txt")


def _seen_state(kv: MemoryKV, item: UrlItem) -> str:
    raw = kv.get(layout.seen_key(seen_fingerprint(item)))
    if raw is None:
        return "absent"
    return {SEEN_OPEN: "open", SEEN_DONE: "done", SEEN_REVISIT: "revisit"}.get(read_seen(raw)[0], "legacy")


def expected(f: PartitionFrontier, kv: MemoryKV, story: dict[str, Any]) -> dict[str, Any]:
    """What a reader of the store must find, read back from the store itself (and checked
    against what the crawl above did)."""
    queues: dict[str, list[dict[str, Any]]] = {}
    by_host: dict[str, list[str]] = {}
    for key, raw in kv.scan(layout.QUEUE):
        qid = layout.queue_of(key)
        item = item_dec.decode(raw)
        queues.setdefault(qid, []).append({"key": key.hex(), "url": item.url, "priority": item.priority})
        by_host.setdefault(layout.queue_host(qid), []).append(item.url)
    inflight: dict[str, dict[str, Any]] = {}
    for key, raw in kv.scan(layout.LEASE):
        lease = lease_dec.decode(raw)
        inflight[layout.lease_of(key)] = {
            "url": lease.item.url, "kind": lease.kind, "scopes": lease.scopes, "qkey": lease.qkey.hex(),
            "deadline": lease.deadline, "dispatched_at": lease.dispatched_at,
        }  # fmt: skip
    revisits = []
    for key, raw in kv.scan(layout.REVISIT):
        item = item_dec.decode(raw)
        due_ms = layout.revisit_due_ms(key)
        revisits.append({"url": item.url, "due": due_ms / 1000, "due_ms": due_ms, "key": key.hex(),
                         "seen": _seen_state(kv, item)})  # fmt: skip
    submitted: dict[bytes, UrlItem] = {}
    for raw in SUBMISSIONS:
        item = parse_input(raw)
        submitted.setdefault(seen_fingerprint(item), item)
    seen = {item.url: _seen_state(kv, item) for item in submitted.values()}
    queued_urls = {u for urls in by_host.values() for u in urls}
    done = sorted(u for u, s in seen.items() if s == "done" and u not in queued_urls)
    overrides = {layout.override_of(k): msgspec.to_builtins(override_dec.decode(v))
                 for k, v in kv.scan(layout.OVERRIDE)}  # fmt: skip
    robots = {}
    for key, raw in kv.scan(layout.ROBOTS):
        rec = robots_dec.decode(raw)
        robots[key[1:].decode()] = {"status": rec.status, "fetched_at": rec.fetched_at, "body": rec.body.decode()}
    stats_raw = kv.get(layout.STATS_KEY)
    assert stats_raw is not None
    stats = msgspec.to_builtins(stats_dec.decode(stats_raw))
    inputs = {k[1:].decode(): int(v) for k, v in kv.scan(layout.INPUT)}
    scope_states = sorted(k[1:].decode() for k, _ in kv.scan(layout.STATE))

    # the crawl above, as a reader should see it
    assert by_host == {
        "www.example.com": ["https://www.example.com/", "https://www.example.com/page/1",
                            "https://www.example.com/about?b=2&a=1"],
        "api.example.org": ["https://api.example.org/v1/items?page=2"],
        "blog.example.fr": ["https://blog.example.fr/post/1", "https://blog.example.fr/post/2"],
    }, by_host  # fmt: skip
    assert [v["url"] for v in inflight.values()] == ["https://api.example.org/v1/items?page=1"], inflight
    assert done == ["https://www.example.com/important"], seen
    assert [r["url"] for r in revisits] == ["https://www.example.com/news"] and revisits[0]["seen"] == "revisit"
    assert revisits[0]["due"] == story["end"] + 3600.0
    assert overrides == {"blog.example.fr": {"paused": True}, "example.org#api": {"delay": 5.0}}, overrides
    assert stats == msgspec.to_builtins(f.stats) and f.inflight == 1 and f.queued() == 6
    assert not any(k.startswith(layout.META) for k, _ in kv.scan(b""))
    return {
        "queued": by_host,  # host -> URLs in dispatch order
        "queues": queues,  # queue id -> entries in dispatch order (key order)
        "queued_total": sum(len(v) for v in by_host.values()),
        "inflight": inflight,  # lease id -> the job in flight
        "done": done,  # seen (done), not queued, no lease
        "revisits": revisits,
        "seen": seen,  # every distinct URL submitted -> its seen state
        "overrides": overrides,
        "robots": robots,
        "scope_states": scope_states,  # scopes with an H<scope> entry
        "inputs": inputs,  # I<role>: last input offset applied per role
        "stats": stats,
    }


def check_rebuild(entries: list[tuple[bytes, bytes]], exp: dict[str, Any], now: float) -> None:
    """The fixture loads with the code that wrote it: a fresh store, a fresh frontier, rebuild."""
    kv = MemoryKV()
    for key, value in entries:
        kv.put(key, value)
    f = PartitionFrontier(PARTITION, kv, FrontierConfig(), ThrottleConfig(), Log(), user_agent=USER_AGENT)
    f.rebuild(now)
    assert f.inflight == len(exp["inflight"]) and f.queued() == exp["queued_total"]
    assert msgspec.to_builtins(f.stats) == exp["stats"]
    assert {k: msgspec.to_builtins(v) for k, v in f.overrides().items()} == exp["overrides"]
    assert f.applied_input("u") == exp["inputs"]["u"] and f.applied_input("f") == exp["inputs"]["f"]
    # the next dispatch: www.example.com's head (api: its scope full; blog: paused)
    out = f.dispatch(now + 10.0)
    assert [j.item.url for j in out.jobs] == [exp["queued"]["www.example.com"][0]], out.jobs


def _source_commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        got = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True)
        return got.stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the directory to write the fixture to")
    args = parser.parse_args(argv)
    if hasattr(layout, "CRAWL") or any("crawl" in name.lower() for name in dir(layout)):
        print(f"{layout.__file__} already knows crawls: not the version-1 layout, refusing", file=sys.stderr)
        return 2
    out: Path = args.out
    names = ("partition.json", "changelog.json")
    existing = [n for n in names if (out / n).exists()]
    if existing:
        print(f"refusing to overwrite {', '.join(existing)} in {out}: never regenerated", file=sys.stderr)
        return 2

    f, kv, log, story = build()
    entries = list(kv.scan(b""))
    replica: dict[bytes, bytes] = {}
    for key, value in log.records:  # a restore from the changelog gives the same store
        if value is None:
            replica.pop(key, None)
        else:
            replica[key] = value
    assert sorted(replica.items()) == entries
    exp = expected(f, kv, story)
    check_rebuild(entries, exp, story["end"] + 1.0)

    source = {
        "commit": _source_commit(),
        "layout": "frontier/partition/keys.py before crawls (version 1)",
        "partition": PARTITION,
        "partitions": PARTITIONS,
        "clock_start": NOW,
        "clock_end": story["end"],
        "rng_seed": SEED,
        "lease_prefix": LEASE_PREFIX,
        "user_agent": USER_AGENT,
        "config": "FrontierConfig() and ThrottleConfig(), the shipped defaults (robots_obey=True)",
        "robots": "obeyed: robots.txt fetched and answered for every origin before its pages",
        "steps": story["steps"],
        "encoding": "key: lowercase hex; value: standard base64 (null: a tombstone); *_text: for reading only",
    }
    state = {
        "format": "crawl-frontier partition store, layout version 1",
        "source": source,
        "entries": [_record(k, v) for k, v in entries],
        "expected": exp,
    }
    changelog = {
        "format": "crawl-frontier partition changelog (crawl.frontier.state records), layout version 1, in write order",
        "source": {key: source[key] for key in ("commit", "partition", "clock_start", "encoding")},
        "records": [_record(k, v) for k, v in log.records],
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, doc in zip(names, (state, changelog), strict=True):
        text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
        (out / name).write_text(text, encoding="utf-8")
        print(f"{out / name}: {len(text.encode())} bytes")
    print(f"{len(entries)} store entries, {len(log.records)} changelog records; written by {layout.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
