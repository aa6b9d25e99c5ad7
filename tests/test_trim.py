"""The trimmer of the service (frontier.service.trim): free heap pages handed back after work, not
again and again while idle, one trim at a time, in a thread of its own."""

from __future__ import annotations

import threading

from frontier.service.trim import Trimmer


def test_trims_after_work_once_the_interval_passed() -> None:
    calls: list[str] = []
    trimmer = Trimmer(lambda: calls.append(threading.current_thread().name) or True, interval=10.0)
    assert trimmer.tick(5, 100.0)  # work done, none trimmed yet
    trimmer.join(5)
    assert calls == ["malloc-trim"]  # not on the caller's thread
    assert not trimmer.tick(9, 105.0)  # more work, but within the interval
    assert not trimmer.tick(5, 200.0) and trimmer.tick(9, 200.0)  # (5 is the count of the last trim)
    trimmer.join(5)
    assert len(calls) == 2 and trimmer.trims == 2


def test_an_idle_process_is_not_trimmed_again() -> None:
    calls: list[int] = []
    trimmer = Trimmer(lambda: calls.append(1) or True, interval=1.0)
    assert trimmer.tick(3, 0.0)
    trimmer.join(5)
    assert not any(trimmer.tick(3, t) for t in (2.0, 50.0, 1e6))  # no work since
    assert calls == [1]


def test_one_trim_at_a_time_and_a_failure_is_not_fatal() -> None:
    release = threading.Event()
    started = threading.Event()

    def slow() -> bool:
        started.set()
        release.wait(5)
        raise OSError("no")

    trimmer = Trimmer(slow, interval=0.0)
    assert trimmer.tick(1, 0.0)
    assert started.wait(5)  # (the trim's thread is in it)
    assert not trimmer.tick(2, 10.0)  # the first still under way
    release.set()
    trimmer.join(5)
    assert trimmer.trims == 0  # it failed: logged, nothing raised
    assert trimmer.tick(2, 20.0)
    trimmer.join(5)


def test_a_slow_trim_spaces_the_next_out() -> None:
    """A trim holds each heap's lock while it walks it: one that took 0.5 s is not followed by
    another within 100 times that."""
    clock = [0.0]

    def slow() -> bool:
        clock[0] += 0.5
        return True

    trimmer = Trimmer(slow, interval=10.0, timer=lambda: clock[0])
    assert trimmer.tick(1, 0.0)
    trimmer.join(5)
    assert not trimmer.tick(2, 11.0) and not trimmer.tick(2, 49.9)
    assert trimmer.tick(2, 50.0)
    trimmer.join(5)
