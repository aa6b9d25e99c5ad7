"""GetURLs' stream (``HandOut._stream``): the batches of jobs it takes are held at their partitions
several at a time: a host's next job, ready while the hold of the batch before it is still on its
way, has its own hold asked at once (the hold is a round trip through the frontier's transaction),
and the URLs go to the client in the order they were taken. Fakes for the pools and the asker: no
broker."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from frontier.config import Config
from frontier.core.lru import LRU
from topics.schemas import Job, Reply, UrlItem
from workers.urlfrontier.handout import HandOut


class Pool:
    """A crawl's ready jobs, as :class:`~workers.urlfrontier.pool.CrawlPool` gives them."""

    def __init__(self) -> None:
        self.crawl = "default"
        self.failure = None
        self.arrived = asyncio.Event()
        self.ready: list[Any] = []
        self.out: list[str] = []
        self.handed = LRU[str, Any](10)  # (what a job given back is looked up in: nothing here)
        self.jobs = SimpleNamespace(endings=SimpleNamespace(let_go=lambda job: None))

    def add(self, lease: str) -> None:
        item = UrlItem(url=f"http://h{lease}.test/", host=f"h{lease}.test", domain=f"h{lease}.test")
        job = Job(lease=lease, item=item, not_before=0.0, expires_at=1e12)
        self.ready.append(SimpleNamespace(job=job, item=item, url=item.url, reported=False, release=_released))
        self.arrived.set()

    def take(self, key: Any, per_queue: int, queues: int, budget: int, counts: dict[str, int]) -> list[Any]:
        taken, self.ready = self.ready[: max(budget, 0)], self.ready[max(budget, 0) :]
        return taken

    async def hand_out(self, job: Any, until: float) -> None:
        self.out.append(job.job.lease)


async def _released() -> None:
    return None


class Asker:
    """Holds answered only when the test lets them: ``asked`` says which leases were asked for."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []
        self.answer = asyncio.Event()

    async def ask(self, query: Any, partitions: list[int]) -> dict[int, Reply]:
        self.asked.append(list(query.leases))
        await self.answer.wait()
        return {p: Reply(id="q", partition=p, counts={"held": len(query.leases)}, leases=query.leases)
                for p in partitions}  # fmt: skip


async def test_a_jobs_hold_is_asked_while_the_hold_of_the_batch_before_it_is_on_its_way() -> None:
    pool, asker = Pool(), Asker()
    hand_out = HandOut(SimpleNamespace(cfg=Config(), asker=asker, pools=None))  # type: ignore[arg-type]
    pool.add("1")
    stream = hand_out._stream([pool], None, 0, 0, 2, 60.0, None)  # type: ignore[list-item, arg-type]
    first = asyncio.ensure_future(stream.__anext__())
    for _ in range(50):
        await asyncio.sleep(0.01)
        if asker.asked:
            break
    assert asker.asked == [["1"]]
    pool.add("2")  # ready while the first hold is on its way
    for _ in range(50):
        await asyncio.sleep(0.01)
        if len(asker.asked) == 2:
            break
    assert asker.asked == [["1"], ["2"]], "the second job's hold waited for the first's"
    asker.answer.set()
    got = [(await first).url, (await stream.__anext__()).url]
    assert got == ["http://h1.test/", "http://h2.test/"] and pool.out == ["1", "2"]
    await stream.aclose()
