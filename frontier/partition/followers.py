"""The crawls' queues of the same scopes that follow another's turn, as the part :class:`Followers`
of :class:`~frontier.partition.queues.Queues` (issue 39: a turn between crawls costs O(1)).

A crawl's queue that lost its scopes' turn to another crawl's queue (scheduled, or waiting for a
response of its scopes) leaves the schedule and the waiters: the next turn of those scopes (any
of the group's queues popped) chooses among them all again (``Queues.choose`` reads the group).
Each used to wait for the host's next response (or its next slot) itself, and be popped then, only
to follow the next turn: about one pop per crawl of the host a job. A queue of the group that
leaves the schedule without a turn (gone with its last URL, or parked with its crawl) may have
been the one they followed: one of them is due at once in its place, and its pop chooses again.
Memory only: a restart schedules every queue (``Queues.load``). Depends on the scheduler.
"""

from __future__ import annotations

from frontier.core.scheduler import Scheduler
from frontier.partition.keys import QueueId, queue_base


class Followers:
    """base queue id → the group's queues out of the schedule until a turn chooses them."""

    __slots__ = ("_of", "_scheduler")

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._of: dict[QueueId, set[QueueId]] = {}

    def __bool__(self) -> bool:
        return bool(self._of)

    def follow(self, qid: QueueId) -> None:
        """``qid`` lost its scopes' turn to another crawl's queue, scheduled or waiting for a response
        of its scopes: it leaves the schedule, and goes when a turn of its scopes chooses it."""
        self._scheduler.discard(qid)
        self._of.setdefault(queue_base(qid), set()).add(qid)

    def active(self, qid: QueueId) -> None:
        """``qid`` takes a turn of its scopes: no longer a follower."""
        base = queue_base(qid)
        followers = self._of.get(base)
        if followers is not None:
            followers.discard(qid)
            if not followers:
                del self._of[base]

    def left(self, qid: QueueId) -> None:
        """``qid``, a counted queue, leaves the schedule for good (forgotten) or until its crawl no
        longer waits (parked): a follower is no longer one; any other queue of its group may have
        been the one its followers follow, so one of them is due at once in its place."""
        base = queue_base(qid)
        followers = self._of.get(base)
        if followers is None:
            return
        if qid in followers:
            followers.discard(qid)
        else:
            self._scheduler.schedule(followers.pop(), 0.0)  # (due at once: its turn decides when it sends)
        if not followers:
            del self._of[base]
