"""Revisits: a fetched URL with a revisit interval waits in ``V<due ms><fingerprint>`` and is
queued again when due, unless its seen entry no longer names that ``V`` entry (forgotten, or
re-queued by a recrawl since: see ``seen.py``), so no URL ever has two revisit chains."""

from __future__ import annotations

import msgspec

from frontier.core import revisit
from frontier.partition.keys import REVISIT, queue_id, revisit_due_ms, revisit_key, revisit_seen_key, seen_key
from frontier.partition.records import encoder, item_dec
from frontier.partition.scopes import Scopes
from frontier.partition.seen import SEEN_LEGACY, SEEN_OPEN, SEEN_REVISIT, read_seen, seen_value
from topics.schemas import Feedback, UrlItem


def learned(item: UrlItem, fb: Feedback) -> UrlItem:
    """``item`` as its fetch left it for the next revisit: the validators the worker sent back
    (kept, bounded, in its ``V`` entry: changelogged), and an adaptive interval moved by what the
    fetch found (frontier.core.revisit). A fetch that judged nothing (an error) changes nothing."""
    if not fb.validators:
        return item
    interval = item.revisit
    if item.revisit_max > 0:
        lo, hi = item.revisit_min, item.revisit_max
        if not item.validators:  # the first fetch: the page's age, when it says, sets the interval
            age = revisit.age_of(fb.validators.get("last-modified", ""), fb.sent_at or fb.done_at)
            interval = revisit.first_interval(lo, hi, age) if age is not None else interval
        else:
            interval = revisit.next_interval(item.revisit, lo, hi, changed=not fb.unchanged)
    validators = {k: v[: revisit.MAX_VALIDATOR_CHARS] for k, v in list(fb.validators.items())[:3]}
    return msgspec.structs.replace(item, revisit=interval, validators=validators)


class Revisits(Scopes):
    def _schedule_revisit(self, item: UrlItem, now: float) -> None:
        """The URL waits in ``V`` until it is due; its seen entry (a *revisit*) keeps the last fetch
        time and names that ``V`` entry. ``V`` is written first: a seen entry never names a
        missing one (a ``V`` entry no seen entry names is dropped when due)."""
        fingerprint = self._fingerprint(item)
        due_ms = int((now + item.revisit) * 1000)
        fresh = msgspec.structs.replace(item, attempts=0, redirects=0)
        self._put(revisit_key(due_ms, fingerprint), encoder.encode(fresh))
        self._put(seen_key(fingerprint), seen_value(SEEN_REVISIT, now, due_ms))
        self._crawl(item.crawl).revisits += 1
        due = due_ms / 1000
        if self._next_revisit is None or due < self._next_revisit:
            self._next_revisit = due

    def _requeue_revisits(self, now: float, limit: int = 1000) -> None:
        self._next_revisit = None
        for n, (key, raw) in enumerate(self.kv.scan(REVISIT)):
            due_ms = revisit_due_ms(key)
            due = due_ms / 1000
            if due > now or n >= limit:
                self._next_revisit = max(due, now)
                return
            entry_key = revisit_seen_key(key)
            seen = self.kv.get(entry_key)
            state, _, named = read_seen(seen) if seen is not None else (SEEN_LEGACY, -1.0, -1)
            item = item_dec.decode(raw)
            crawl = self._crawl(item.crawl)
            crawl.revisits = max(0, crawl.revisits - 1)
            if state != SEEN_REVISIT or named not in (-1, due_ms):
                self._delete(key)  # forgotten, or re-queued by a recrawl since: this chain ends here
                continue
            qid = queue_id(self.scopes_of(item), item.crawl)
            # in the order they became due (a client's known URL may be due long before it came):
            # queued before the V entry goes
            self._enqueue(self._qkey_due(qid, item, due), item, now, raw)
            self._put(entry_key, seen_value(SEEN_OPEN, now))
            self._delete(key)
            self.stats.revisits += 1
