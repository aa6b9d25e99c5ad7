"""The workers' offset tracker: a partition's committed offset never passes a job still being
worked on, so a worker killed mid-job has that job delivered again (at least once)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workers.api.offsets import OffsetTracker

T = "crawl.jobs"


def points(tracker: OffsetTracker, tps: set[tuple[str, int]] | None = None) -> dict[int, int]:
    return {tp.partition: tp.offset for tp in tracker.commit_points(tps)}


def test_the_commit_point_stops_at_the_oldest_unfinished_offset() -> None:
    t = OffsetTracker()
    for offset in (10, 11, 12):
        t.started(T, 0, offset)
    t.finished(T, 0, 11)
    t.finished(T, 0, 12)
    assert points(t) == {0: 10}  # 10 is still open: 11 and 12 are redelivered after a crash
    t.finished(T, 0, 10)
    assert points(t) == {0: 13}  # everything done: commit the offset after the last one
    assert t.open_count() == 0


def test_partitions_are_independent_and_forgotten_on_revoke() -> None:
    t = OffsetTracker()
    t.started(T, 0, 5)
    t.started(T, 1, 7)
    t.finished(T, 1, 7)
    assert points(t) == {0: 5, 1: 8}
    assert points(t, {(T, 1)}) == {1: 8} and t.open_count({(T, 0)}) == 1
    t.forget({(T, 0)})
    assert points(t) == {1: 8} and t.open_count() == 0


def test_nothing_is_committed_for_a_partition_never_consumed() -> None:
    assert OffsetTracker().commit_points() == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 1000)), min_size=1, max_size=60))
def test_never_commits_past_an_unfinished_job(steps: list[tuple[int, bool, int]]) -> None:
    """Offsets arrive in order per partition and finish in any order; at every moment the commit
    point of a partition is the lowest unfinished offset, or one past the highest started."""
    t = OffsetTracker()
    started: dict[int, list[int]] = {}
    open_: dict[int, set[int]] = {}
    for partition, finish, pick in steps:
        if finish and open_.get(partition):
            offset = sorted(open_[partition])[pick % len(open_[partition])]
            t.finished(T, partition, offset)
            open_[partition].discard(offset)
        else:
            offset = len(started.setdefault(partition, [])) * 3  # offsets may have gaps (compaction, markers)
            started[partition].append(offset)
            open_.setdefault(partition, set()).add(offset)
            t.started(T, partition, offset)
        expected = {p: min(o) if o else started[p][-1] + 1 for p, o in open_.items()}
        assert points(t) == expected
        for p, committed in points(t).items():
            assert all(committed <= o for o in open_[p])


def test_a_job_taken_before_a_revoke_inside_the_same_take_is_dropped() -> None:
    """poll() returns a job of partition 0; the revoke of partition 0 is served inside the
    consume() that follows (its offsets committed before that job was tracked): the job is left to
    the partition's new owner, never fetched here too."""
    from dataclasses import dataclass

    from confluent_kafka import TopicPartition

    from workers.api.consuming import _take

    @dataclass
    class Msg:
        p: int
        o: int

        def topic(self) -> str:
            return "crawl.jobs"

        def partition(self) -> int:
            return self.p

        def offset(self) -> int:
            return self.o

        def error(self) -> None:
            return None

    class Consumer:
        assigned = {0, 1}

        def poll(self, timeout: float) -> Msg:
            return Msg(0, 7)

        def consume(self, n: int, timeout: float) -> list[Msg]:
            self.assigned = {1}  # the revoke callback ran in here
            return [Msg(1, 3)]

        def assignment(self) -> list[TopicPartition]:
            return [TopicPartition("crawl.jobs", p) for p in sorted(self.assigned)]

    taken = _take(Consumer(), 10)  # type: ignore[arg-type]
    assert [(m.partition(), m.offset()) for m in taken] == [(1, 3)]


# -- what a previous owner reported (issue 27: reported is done) ------------------------------------
def test_finished_offsets_above_the_commit_point_travel_with_it_and_are_skipped_by_the_next_owner() -> None:
    old = OffsetTracker()
    for offset in range(100, 110):
        old.started(T, 0, offset)
    for offset in (101, 102, 103, 105, 109):
        old.finished(T, 0, offset)
    [tp] = old.commit_points()
    assert tp.offset == 100 and tp.metadata == "done:1-3,5,9"
    new = OffsetTracker()
    assert new.skip([tp]) == 5
    fetched = [o for o in range(100, 110) if not new.reported_before(T, 0, o)]
    assert fetched == [100, 104, 106, 107, 108]  # only what was not reported is fetched again
    for o in fetched:
        new.started(T, 0, o)
        new.finished(T, 0, o)
    assert [(p.offset, p.metadata) for p in new.commit_points()] == [(110, None)]


def test_metadata_that_cannot_be_read_skips_nothing() -> None:
    from confluent_kafka import TopicPartition

    t = OffsetTracker()
    for metadata in ("", "garbage", "done:x", "done:5-2", "done:-1"):
        assert t.skip([TopicPartition(T, 0, 10, metadata)]) == 0
    assert not t.reported_before(T, 0, 11)


def test_metadata_stays_within_its_bound() -> None:
    from workers.api.offsets import METADATA_CHARS, decode_done, encode_done

    done = set(range(1, 20_000, 2))  # 10,000 lone offsets
    text = encode_done(0, done)
    assert text is not None and len(text) <= METADATA_CHARS
    assert decode_done(0, text) <= done and min(decode_done(0, text)) == 1


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 500), max_size=80), st.integers(0, 10**9))
def test_done_offsets_round_trip(done: set[int], base: int) -> None:
    from workers.api.offsets import decode_done, encode_done

    shifted = {base + 1 + o for o in done}
    assert decode_done(base, encode_done(base, shifted)) == shifted


def test_a_finish_of_a_forgotten_partition_is_ignored() -> None:
    t = OffsetTracker()
    t.started(T, 0, 5)
    t.forget({(T, 0)})
    t.started(T, 0, 5)  # the partition came back: the same offset, delivered again
    t.finished(T, 0, 4)  # a stale finish from before is no business of this incarnation
    assert points(t) == {0: 5}
