"""The demo site fleet records when its own event loop stalls: a request arriving meanwhile is
stamped late, which shortens the gap after it in the sites' logs (the integration tests judge
politeness from those logs, so a failure must show whether the fleet itself was starved)."""

import time

from frontier.demo.sites import SiteFleet
from frontier.demo.stack import wait_until


def test_a_stalled_fleet_loop_is_recorded() -> None:
    fleet = SiteFleet(1, pages=1, first_octet=230).start()
    try:
        assert fleet._loop is not None
        before = time.time()
        fleet._loop.call_soon_threadsafe(time.sleep, 0.08)  # what a starved process looks like to the loop
        wait_until(lambda: any(d >= 0.06 for _, d in fleet.stalls_between(before, time.time())), timeout=5,
                   interval=0.01, what="the stall to be recorded")  # fmt: skip
    finally:
        fleet.stop()
