from frontier.scheduler import Scheduler


def test_pops_in_time_order_and_only_when_due() -> None:
    s = Scheduler()
    s.schedule("b", 2.0)
    s.schedule("a", 1.0)
    s.schedule("c", 3.0)
    assert s.pop_due(0.5) is None
    assert s.pop_due(2.5) == "a"
    assert s.pop_due(2.5) == "b"
    assert s.pop_due(2.5) is None
    assert s.next_time() == 3.0 and len(s) == 1


def test_reschedule_replaces_entry_both_ways() -> None:
    s = Scheduler()
    s.schedule("a", 5.0)
    s.schedule("a", 1.0)
    assert s.pop_due(1.0) == "a" and s.pop_due(10.0) is None
    s.schedule("b", 1.0)
    s.schedule("b", 5.0)
    assert s.pop_due(2.0) is None and s.next_time() == 5.0


def test_discard() -> None:
    s = Scheduler()
    s.schedule("a", 1.0)
    s.discard("a")
    assert "a" not in s and s.pop_due(9.0) is None and s.next_time() is None
