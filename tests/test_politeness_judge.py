"""The sites' judgement of gaps (tests/integration/helpers.py): a gap the fleet's own stalled event
loop shortened (the first request stamped when the loop came back) is judged from when the stall
began; a gap no stall explains, or one a stall explains only in part, is a failure."""

from __future__ import annotations

from frontier.demo.sites import Hit, SiteFleet
from tests.integration.helpers import politeness_failures

T = 1_790_000_000.0


def fleet(first: float, second: float, stalls: list[tuple[float, float]]) -> SiteFleet:
    f = SiteFleet(1, first_octet=250)
    f.sites[0].hits = [Hit("/", T + first), Hit("/page/1", T + second)]
    f.stalls = [(T + t, d) for t, d in stalls]
    return f


def test_a_gap_shortened_by_a_stall_before_its_first_stamp_is_judged_from_the_stall() -> None:
    # CI at e117264: the loop stalled 0.043 s (looked at 0.048 s before) and stamped the first request
    # as it came back; the second came 0.158 s after that stamp, 0.2 s after the stall began
    assert not politeness_failures(fleet(0.0, 0.158, [(-0.048, 0.043)]), 0.2, 1)


def test_a_short_gap_is_a_failure_when_no_stall_explains_it() -> None:
    assert politeness_failures(fleet(0.0, 0.158, []), 0.2, 1)
    assert politeness_failures(fleet(0.0, 0.158, [(-0.5, 0.043)]), 0.2, 1), "a stall long over delayed nothing"
    assert politeness_failures(fleet(0.0, 0.1, [(-0.048, 0.043)]), 0.2, 1), "explained in part only"
    assert politeness_failures(fleet(0.0, 0.158, [(0.05, 0.043)]), 0.2, 1), "a stall after the stamp"
    assert not politeness_failures(fleet(0.0, 0.18, []), 0.2, 1)  # within the tolerance (0.03 s)
