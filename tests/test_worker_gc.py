"""The fetch worker's process (workers/fetcher/worker.py run_worker): what start-up made is frozen
out of the garbage collector's sight before the worker runs (issue 39: a fetch's share of the
collector's CPU)."""

from __future__ import annotations

import gc

import pytest

from frontier.config import Config
from workers.fetcher import worker as fetch_worker


def test_run_worker_freezes_what_start_up_made_before_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    class Worker:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def stop(self) -> None:
            pass

        async def run(self) -> None:
            seen.append(gc.get_freeze_count())

    monkeypatch.setattr(fetch_worker, "FetchWorker", Worker)
    gc.unfreeze()
    try:
        fetch_worker.run_worker(Config())
    finally:
        gc.unfreeze()  # (the other tests' objects back in the collector's sight)
    assert seen and seen[0] > 0
