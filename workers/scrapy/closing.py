"""When a Scrapy process may close its spider: when its crawl is done everywhere (the crawls'
"done": nothing queued, leased or on its way in, as every partition's owner reports it), not when
this process has nothing in hand. A thread asks the frontier (:meth:`FrontierClient.wait_done`)
while the process is idle; an answer counts only if nothing happened here since it was asked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from frontier.client import FrontierClient

log = logging.getLogger("workers.scrapy")

ASK_EVERY = 0.5  # seconds between questions while the process is busy
SAY_EVERY = 30.0  # seconds between log lines on what keeps the crawl open


class DoneWatch:
    """``done()``: the crawl is done and nothing happened in this process since that was seen."""

    def __init__(self, client: FrontierClient, crawl: str, busy: Callable[[], bool]) -> None:
        self.client = client
        self.crawl = crawl
        self.busy = busy
        self.activity = 0  # bumped by the scheduler on each job taken and request sent
        self._done_at = -1  # the activity count the last "done" was seen at
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"done-watch:{crawl}", daemon=True)
        self.left = "not asked yet"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def touch(self) -> None:
        self.activity += 1

    def done(self) -> bool:
        return self._done_at == self.activity and not self.busy()

    def _run(self) -> None:
        said = time.monotonic()
        while not self._stop.is_set():
            mark = self.activity  # before busy(): the scheduler counts after the state that makes it busy
            if self.busy():
                self._stop.wait(ASK_EVERY)
                continue
            try:
                answer = self.client.wait_done(self.crawl, timeout=5.0)
            except Exception as exc:  # noqa: BLE001 - a broker hiccup: ask again
                self.left = f"{type(exc).__name__}: {exc}"
                self._stop.wait(1.0)
                continue
            if answer.done and mark == self.activity and not self.busy():
                self._done_at = mark
                self._stop.wait(ASK_EVERY)
                continue
            self.left = answer.left or "work elsewhere"
            if time.monotonic() - said > SAY_EVERY:
                said = time.monotonic()
                if "not reported by a live instance" in self.left:  # no frontier: it would wait forever
                    log.warning("crawl %r not done: %s. Is a frontier running (crawl-frontier frontier, with this "
                                "configuration)? The spider closes once the crawl is done everywhere.",
                                self.crawl, self.left)  # fmt: skip
                else:
                    log.info("crawl %r not done: %s", self.crawl, self.left)
