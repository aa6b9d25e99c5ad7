"""The fetch worker's event loop (workers/fetcher/worker.py run_worker): uvloop's when it is
installed (issue 39: the loop, its transports and timers in C), asyncio's when it is not or when
``CRAWL_FRONTIER_EVENT_LOOP=asyncio`` asks for it."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest

from frontier.config import Config
from workers.fetcher import worker as fetch_worker


class _Worker:
    loops: list[asyncio.AbstractEventLoop] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def stop(self) -> None:
        pass

    async def run(self) -> None:
        _Worker.loops.append(asyncio.get_running_loop())


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[asyncio.AbstractEventLoop]:
    """A stand-in ``uvloop`` module whose ``new_event_loop`` records the loops it made."""
    loops: list[asyncio.AbstractEventLoop] = []

    def new_event_loop() -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        loops.append(loop)
        return loop

    monkeypatch.setitem(sys.modules, "uvloop", types.SimpleNamespace(new_event_loop=new_event_loop))
    monkeypatch.setattr(fetch_worker, "FetchWorker", _Worker)
    monkeypatch.setattr(fetch_worker, "tune_collector", lambda: None)
    monkeypatch.delenv(fetch_worker.EVENT_LOOP_ENV, raising=False)
    _Worker.loops = []
    return loops


def test_the_worker_runs_on_uvloops_loop_when_uvloop_is_installed(made: list[asyncio.AbstractEventLoop]) -> None:
    fetch_worker.run_worker(Config())
    assert len(made) == 1 and _Worker.loops == made


def test_asyncios_loop_when_asked(made: list[asyncio.AbstractEventLoop], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fetch_worker.EVENT_LOOP_ENV, "asyncio")
    fetch_worker.run_worker(Config())
    assert made == [] and len(_Worker.loops) == 1


def test_asyncios_loop_without_uvloop(made: list[asyncio.AbstractEventLoop], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert fetch_worker.loop_factory() is None
    fetch_worker.run_worker(Config())
    assert made == [] and len(_Worker.loops) == 1


def test_the_real_uvloop_runs_a_fetch_worker_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """With uvloop itself (skipped where it is not installed)."""
    uvloop = pytest.importorskip("uvloop")
    monkeypatch.setattr(fetch_worker, "FetchWorker", _Worker)
    monkeypatch.setattr(fetch_worker, "tune_collector", lambda: None)
    monkeypatch.delenv(fetch_worker.EVENT_LOOP_ENV, raising=False)
    _Worker.loops = []
    fetch_worker.run_worker(Config())
    assert isinstance(_Worker.loops[0], uvloop.Loop)
