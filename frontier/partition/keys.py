"""The key layout of a partition's store: every key prefix, the builders and parsers of keys, and
:data:`QueueId`. No other module builds or takes apart a key, or joins or splits a queue id.

Keys are bytes, ordered bytewise (see :class:`~frontier.core.kv.KV`). The layout is that of
stores and changelogs written by earlier versions and must stay byte for byte:

- ``S<fingerprint>``                   seen URL (canonical form), value: its state and stamp (``seen.py``)
- ``Q<queue>\\x00<prio><seq>``          queued URL (highest priority first, FIFO within), value: UrlItem
- ``H<scope>``                         the scope's policy state, value: ScopeState
- ``R<origin>``                        an origin's robots.txt answer (scheme://host[:port]), value: RobotsRecord
- ``L<lease>``                         a job in flight, or a result still to report, value: Lease
- ``C``                                the partition's counters, value: Stats (they move with it)
- ``O<name>``                          an operator's override of a scope name (pause, delay, concurrency)
- ``V<due ms><fingerprint>``           a fetched URL due for a revisit at ``due``, value: UrlItem
- ``K<crawl>``                         a crawl's record in this partition (its commands, counters and
  seen-set generation), value: CrawlRecord (``crawls.py``; version 3)
- ``U<crawl>\\x1e<key>\\x1f<url>``     a URLFrontier client's recorded URL in its crawl under its queue key,
  value: ApiRecord (``recorded.py``; version 3)
- ``I<input>``                         the offset of the last record of an input topic (``u`` URL batches,
  ``f`` feedback, ``c`` control) applied to the partition, written in the same transaction as its
  effects: a record delivered again after a rebalance is applied once (``frontier.service``)
- ``\\x00…`` (``META``)                 local bookkeeping of the instance that holds the store, never
  sent to the changelog: the clean-close and standby markers (``frontier.service.restore``,
  ``frontier.service.standby``); ``ACK_KEY`` is the one META key that goes to the changelog, as a
  tombstone closing a run of writes (``frontier.service.service``), and is never stored.

``<prio>`` is 4 bytes big-endian, ``2**31 - 1 - priority`` (so the highest priority sorts first),
``<seq>`` 8 bytes big-endian (FIFO within a priority), ``<due ms>`` 8 bytes big-endian.

A queue id names the set of scopes its URLs belong to: the scopes joined by ``\\x1f`` (a byte no
scope name may hold, see ``topics.schemas.ControlCommand``), the host's scope first. A single-scope
queue's id is the scope itself. A queue of a crawl other than the default one starts with the
crawl's name and ``\x1e`` (no crawl name holds a control character): ``books\x1eexample.com``; the
default crawl's queues keep the ids they had before crawls, so stores written then load as they are.
:data:`QueueId` is a ``NewType`` of ``str`` rather than a ``str``
subclass: ids are interned (one string object per queue, however many structures hold it: there
can be millions) and a subclass can neither be interned nor stored as a compact string.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable
from typing import NewType

# -- prefixes ----------------------------------------------------------------------------------------
SEEN = b"S"
QUEUE = b"Q"
STATE = b"H"
ROBOTS = b"R"
LEASE = b"L"
STATS_KEY = b"C"
OVERRIDE = b"O"
REVISIT = b"V"
INPUT = b"I"
CRAWL = b"K"
RECORD = b"U"
META = b"\x00"  # local bookkeeping: never goes to the changelog (ACK_KEY aside, see the module doc)

CLEAN_KEY = META + b"clean-offset"  # present only while the database is closed cleanly
CLEAN_AT_KEY = META + b"clean-at"  # wall-clock time (epoch s) of that clean close
STANDBY_KEY = META + b"standby-offset"  # a standby copy: only changelog records, applied up to here
STANDBY_AT_KEY = META + b"standby-at"  # every changelog record written before this time is in the copy
MARKER_KEYS = (CLEAN_KEY, CLEAN_AT_KEY, STANDBY_KEY, STANDBY_AT_KEY)
# An owned partition's store holds only committed transactions (frontier.service.pending), each
# written in one batch with these: complete up to this changelog offset, as of this wall-clock time
COMMITTED_KEY = META + b"committed-offset"
COMMITTED_AT_KEY = META + b"committed-at"
ACK_KEY = META + b"ack"  # marker records closing a run of changelog writes (tombstones; never stored)

_END = b"\x00"  # ends a queue id in a queue key
_DUE = struct.Struct(">Q")
_PRIO = struct.Struct(">IQ")
_MAX_PRIO = 2**31 - 1
_SLICE = struct.Struct(">H")
SWEEP_SLICES = 1 << 16  # the seen set in slices by the first two bytes of the fingerprint (the sweep's cursor)

# -- queue ids ---------------------------------------------------------------------------------------
QueueId = NewType("QueueId", str)
SEP = "\x1f"  # between the scopes of a queue id
CRAWL_SEP = "\x1e"  # after the crawl's name, in the id of a queue of a crawl other than the default one
DEFAULT_CRAWL = "default"


def queue_id(scopes: Iterable[str], crawl: str = DEFAULT_CRAWL) -> QueueId:
    """The id of the crawl's queue of URLs in exactly these scopes (the host's first), interned."""
    joined = SEP.join(scopes)
    return QueueId(sys.intern(joined if crawl == DEFAULT_CRAWL else f"{crawl}{CRAWL_SEP}{joined}"))


def scope_queue(scope: str) -> QueueId:
    """The id of the default crawl's queue of URLs in ``scope`` alone (a host's own queue)."""
    return QueueId(scope)


def queue_scopes(qid: QueueId) -> list[str]:
    """The scopes of a queue, the host's first."""
    return qid.rpartition(CRAWL_SEP)[2].split(SEP)


def queue_host(qid: QueueId) -> str:
    """The host (the first scope) of a queue."""
    return qid.rpartition(CRAWL_SEP)[2].partition(SEP)[0]


def queue_crawl(qid: QueueId) -> str:
    """The crawl of a queue."""
    crawl, sep, _ = qid.partition(CRAWL_SEP)
    return crawl if sep else DEFAULT_CRAWL


def queue_base(qid: QueueId) -> QueueId:
    """The id of the default crawl's queue of the same scopes (what the crawls' queues of one set
    of scopes share: their turns are shared out)."""
    return QueueId(sys.intern(qid.rpartition(CRAWL_SEP)[2])) if CRAWL_SEP in qid else qid


def is_multi(qid: QueueId) -> bool:
    """Whether the queue is not a host's own queue in the default crawl: its URLs are in more
    than one scope, or in another crawl (either way it is indexed under its scopes, and waits on
    them as a waiter: see ``Queues``)."""
    return SEP in qid or CRAWL_SEP in qid


# -- builders and parsers ------------------------------------------------------------------------
def seen_key(fingerprint: bytes) -> bytes:
    return SEEN + fingerprint


def seen_slice(n: int) -> bytes:
    """The prefix of the seen entries of slice ``n`` (0 <= n < SWEEP_SLICES)."""
    return SEEN + _SLICE.pack(n)


def queue_prefix(qid: QueueId) -> bytes:
    """The prefix of every entry of the queue ``qid`` (a scan yields them in dispatch order)."""
    return QUEUE + qid.encode() + _END


def queue_key(qid: QueueId, priority: int, seq: int) -> bytes:
    """An entry of ``qid``: higher ``priority`` first, then lower ``seq`` (both clamped to the layout)."""
    prio = _MAX_PRIO - max(-_MAX_PRIO, min(_MAX_PRIO, priority))
    return queue_prefix(qid) + _PRIO.pack(prio, min(seq, 2**64 - 1))


def queue_seq(key: bytes) -> int:
    """The sequence of a queue entry's key."""
    seq: int = _PRIO.unpack(key[-_PRIO.size :])[1]
    return seq


def entry_priority(key: bytes) -> int:
    """The priority of a queue entry's key."""
    prio: int = _PRIO.unpack(key[-_PRIO.size :])[0]
    return _MAX_PRIO - prio


def queue_of(key: bytes) -> QueueId:
    """The queue id of a queue entry's key (interned)."""
    return QueueId(sys.intern(key[1 : key.index(_END)].decode()))


def state_key(scope: str) -> bytes:
    return STATE + scope.encode()


def robots_key(site: str) -> bytes:
    return ROBOTS + site.encode()


def input_key(role: str) -> bytes:
    return INPUT + role.encode()


def lease_key(lease_id: str) -> bytes:
    return LEASE + lease_id.encode()


def lease_of(key: bytes) -> str:
    """The lease id of a lease key."""
    return key[1:].decode()


def crawl_key(crawl: str) -> bytes:
    return CRAWL + crawl.encode()


def crawl_of(key: bytes) -> str:
    """The crawl name of a crawl record's key."""
    return key[1:].decode()


def override_key(name: str) -> bytes:
    return OVERRIDE + name.encode()


def override_of(key: bytes) -> str:
    """The scope name of an override key."""
    return key[1:].decode()


def revisit_key(due_ms: int, fingerprint: bytes) -> bytes:
    return REVISIT + _DUE.pack(due_ms) + fingerprint


def revisit_due_ms(key: bytes) -> int:
    """The due time (epoch ms) of a revisit key."""
    due: int = _DUE.unpack(key[1:9])[0]
    return due


def revisit_seen_key(key: bytes) -> bytes:
    """The seen key of the URL a revisit key names."""
    return SEEN + key[9:]


def record_prefix(crawl: str, key: str | None = None) -> bytes:
    """The records of a crawl, or of one of its queue keys."""
    base = RECORD + crawl.encode() + CRAWL_SEP.encode()
    return base if key is None else base + key.encode() + SEP.encode()


def record_key(crawl: str, key: str, url: str) -> bytes:
    return record_prefix(crawl, key) + url.encode()


def records_after(crawl: str, key: str) -> bytes:
    """A key above every record of the crawl's queue ``key`` and below those of the keys after it
    (a key holds no control character, so its records are together and keys sort as strings;
    no URL's UTF-8 holds the byte 0xff)."""
    return record_prefix(crawl, key) + b"\xff"


def split_record_key(raw: bytes) -> tuple[str, str, str]:
    """(crawl, key, url) of a record key."""
    crawl, _, rest = raw[1:].partition(CRAWL_SEP.encode())
    key, _, url = rest.partition(SEP.encode())
    return crawl.decode(), key.decode(), url.decode()
