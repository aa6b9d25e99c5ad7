"""A worker's per-host gate: its last send, the end of its last response, a window the host
announced, and (only while a job uses it) the lock and event that order the host's sends."""

from __future__ import annotations

import asyncio


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


class _HostGate:
    """One host's local timing, as seen by this worker.

    Cheap while idle (one small slotted object per host ever seen until
    :meth:`~workers.api.holding.Holder.prune_gates` forgets it): the lock and the event exist only
    while a job of the host is using the gate (``users`` > 0, from taking it to the end of its
    fetch) and are dropped when the last one leaves.
    A fresh lock is unlocked and a fresh event is set, which is what an idle gate's were.
    """

    __slots__ = ("_idle", "_lock", "closed_until", "last_end", "last_sent", "users")

    def __init__(self) -> None:
        self.last_sent = 0.0
        # A window the host announced (Retry-After, RateLimit remaining=0), by this worker's clock: jobs
        # of the host this worker holds are not sent inside it, even those the frontier dispatched
        # before it heard of it (THROTTLING.md v2 §4).
        self.closed_until = 0.0
        self.last_end = 0.0  # when the host's latest response ended (server-stated floors count from here)
        self.users = 0  # jobs between taking this gate and the end of their fetch
        self._lock: asyncio.Lock | None = None
        self._idle: asyncio.Event | None = None

    @property
    def lock(self) -> asyncio.Lock:
        """Held by the job that is timing its send."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    @property
    def idle(self) -> asyncio.Event:
        """Set when no request of this host is between its slot and its send."""
        if self._idle is None:
            self._idle = _set_event()
        return self._idle

    def busy(self) -> bool:
        """A job uses the gate, holds its lock, or has a request between slot and send."""
        return (
            self.users > 0
            or (self._lock is not None and self._lock.locked())
            or (self._idle is not None and not self._idle.is_set())
        )

    def enter(self) -> None:
        self.users += 1

    def leave(self) -> None:
        """A job is done with the gate; the last one out drops the lock and the event."""
        self.users -= 1
        if not self.busy():
            self._lock = self._idle = None
