"""bench-catchup's verdict on issue 23's target (syncer >= 0.85 x L_raw) for one case."""

from __future__ import annotations

from tests.bench.catchup import effective_l_raw, verdict
from tests.bench.raw import Phase, RawLimit

FITS = {"target_fits": True, "cores_at_target_floor": 1.6, "cores": 2}
TIGHT = {"target_fits": False, "cores_at_target_floor": 2.3, "cores": 2}


def test_a_copy_at_the_target_meets_it_whatever_else_was_measured() -> None:
    assert verdict(85.0, 100.0, 60.0, TIGHT) == "met"


def test_both_brokers_at_once_below_the_target_put_it_out_of_reach() -> None:
    line = verdict(70.0, 100.0, 74.0, FITS)
    assert line.startswith("out of reach here: both brokers at once")
    assert "0.74 x L_raw" in line


def test_a_target_that_needs_more_cores_than_the_machine_is_out_of_reach() -> None:
    assert verdict(70.0, 100.0, 90.0, TIGHT) == "out of reach here: needs 2.30 cores of 2"
    assert verdict(70.0, 100.0, None, TIGHT) == "out of reach here: needs 2.30 cores of 2"


def test_below_the_target_with_room_to_reach_it_is_not_met() -> None:
    assert verdict(70.0, 100.0, 90.0, FITS) == "not met"
    assert verdict(70.0, 100.0, None, FITS) == "not met"


def test_l_raw_takes_the_faster_append_of_the_phase_alone_and_both_at_once() -> None:
    def phase(seconds: float) -> Phase:
        return Phase(seconds, (1.0,), 0)

    limit = RawLimit((phase(1.0),), (phase(5.0),), payload_bytes=1_000_000_000, procs=1)
    assert limit.mb_per_s == 200.0  # serve 1000 MB/s, append 200
    assert effective_l_raw(limit, None) == 200.0
    assert effective_l_raw(limit, 150.0) == 200.0  # both at once slower: as measured
    assert effective_l_raw(limit, 250.0) == 250.0  # the append phase alone fell short
    assert effective_l_raw(limit, 5000.0) == 1000.0  # never above the serving
