"""The partition's key layout (frontier/partition/keys.py): byte for byte what earlier versions
wrote (existing stores and changelogs must still read), queue ids round-trip and stay interned,
and no other module builds keys or joins/splits queue ids."""

from __future__ import annotations

import re
from pathlib import Path

from frontier.partition.keys import (
    ACK_KEY,
    CLEAN_AT_KEY,
    CLEAN_KEY,
    LEASE,
    MARKER_KEYS,
    META,
    OVERRIDE,
    QUEUE,
    REVISIT,
    SEEN,
    STANDBY_AT_KEY,
    STANDBY_KEY,
    STATE,
    STATS_KEY,
    is_multi,
    lease_key,
    lease_of,
    override_key,
    override_of,
    queue_host,
    queue_id,
    queue_key,
    queue_of,
    queue_prefix,
    queue_scopes,
    revisit_due_ms,
    revisit_key,
    revisit_seen_key,
    robots_key,
    scope_queue,
    seen_key,
    seen_slice,
    state_key,
)

ROOT = Path(__file__).resolve().parent.parent


def test_the_byte_layout_is_the_one_stores_were_written_with() -> None:
    assert (SEEN, QUEUE, STATE, LEASE, STATS_KEY, OVERRIDE, REVISIT, META) == (
        b"S", b"Q", b"H", b"L", b"C", b"O", b"V", b"\x00"
    )  # fmt: skip
    assert seen_key(b"\x01\x02fp") == b"S\x01\x02fp" and seen_slice(0x1234) == b"S\x12\x34"
    qid = queue_id(["a.test", "ip:10.0.0.1", "test#api"])
    assert queue_prefix(qid) == b"Qa.test\x1fip:10.0.0.1\x1ftest#api\x00"
    # priority: 2**31 - 1 - priority, 4 bytes; sequence: 8 bytes; both big-endian
    assert queue_key(qid, 5, 7) == queue_prefix(qid) + b"\x7f\xff\xff\xfa" + b"\x00" * 7 + b"\x07"
    assert queue_key(qid, 2**40, 2**70)[-12:] == b"\x00\x00\x00\x00" + b"\xff" * 8  # clamped, not wrapped
    assert queue_key(qid, -(2**40), 0)[-12:-8] == b"\xff\xff\xff\xfe"
    assert state_key("a.test") == b"Ha.test" and robots_key("https://a.test") == b"Rhttps://a.test"
    assert lease_key("ab12") == b"Lab12" and override_key("a.test") == b"Oa.test"
    assert revisit_key(1000, b"fp") == b"V\x00\x00\x00\x00\x00\x00\x03\xe8fp"
    assert (CLEAN_KEY, CLEAN_AT_KEY, STANDBY_KEY, STANDBY_AT_KEY, ACK_KEY) == (
        b"\x00clean-offset", b"\x00clean-at", b"\x00standby-offset", b"\x00standby-at", b"\x00ack"
    )  # fmt: skip
    assert MARKER_KEYS == (CLEAN_KEY, CLEAN_AT_KEY, STANDBY_KEY, STANDBY_AT_KEY)


def test_keys_parse_back() -> None:
    qid = queue_id(["a.test", "ip:10.0.0.1"])
    key = queue_key(qid, 0, 42)
    assert queue_of(key) == qid and queue_of(key) is qid  # interned: one object per queue
    assert lease_of(lease_key("ab12")) == "ab12" and override_of(override_key("x.test")) == "x.test"
    key = revisit_key(123_456, b"\x00\xffprint")
    assert revisit_due_ms(key) == 123_456 and revisit_seen_key(key) == seen_key(b"\x00\xffprint")


def test_queue_order_is_priority_first_then_fifo() -> None:
    qid = scope_queue("a.test")
    entries = [(0, 3), (10, 9), (0, 1), (-5, 0), (10, 2), (2**40, 5)]
    keys = sorted(queue_key(qid, prio, seq) for prio, seq in entries)
    assert keys == [queue_key(qid, p, s) for p, s in [(2**40, 5), (10, 2), (10, 9), (0, 1), (0, 3), (-5, 0)]]
    assert all(k.startswith(queue_prefix(qid)) for k in keys)
    # a queue whose id extends another's does not fall inside the other's prefix
    assert not queue_key(queue_id(["a.test", "b"]), 0, 0).startswith(queue_prefix(qid))


def test_queue_ids() -> None:
    multi = queue_id(["a.test", "ip:10.0.0.1"])
    assert queue_scopes(multi) == ["a.test", "ip:10.0.0.1"] and queue_host(multi) == "a.test" and is_multi(multi)
    single = scope_queue("a.test")
    assert single == queue_id(["a.test"]) and queue_scopes(single) == ["a.test"]
    assert queue_host(single) == "a.test" and not is_multi(single)
    assert queue_id(["x.test", "y"]) is queue_id(iter(["x.test", "y"]))


def test_no_module_but_keys_builds_keys_or_queue_ids() -> None:
    allowed = {ROOT / "frontier" / "partition" / "keys.py", ROOT / "topics" / "schemas.py"}  # schemas: refuses \x1f
    offenders = []
    for top in ("frontier", "workers", "topics", "deploy"):
        for path in (ROOT / top).rglob("*.py"):
            if path in allowed or "proto" in path.parts:  # proto: generated gRPC stubs
                continue
            text = path.read_text()
            if "\\x1f" in text or "\x1f" in text or re.search(r'\bb"[SQHRLCOV]"', text) or 'b"\\x00' in text:
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, offenders
