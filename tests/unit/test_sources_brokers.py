"""The per-broker back-off of one remote (``syncer.brokers``) on plain values: a failed broker
backs off alone, and the remote fails as a whole only when every broker it routes to has."""

from __future__ import annotations

from syncer.brokers import BROKER_BACKOFF_MAX_S, BROKER_BACKOFF_S, ROUTED_S, BrokerBackoff


def three_answering(now: float = 0.0) -> BrokerBackoff:
    brokers = BrokerBackoff()
    for node in (1, 2, 3):
        brokers.sent(node, now)
        brokers.answered(node, now)
    return brokers


def test_one_broker_failing_backs_off_alone_and_the_remote_does_not_fail() -> None:
    brokers = three_answering()
    assert brokers.failed(1, 1.0, sent=0.5) is False
    assert brokers.backing_off(1, 1.0) and brokers.backing_off(1, 1.0 + BROKER_BACKOFF_S / 2)
    assert not brokers.backing_off(2, 1.0) and not brokers.backing_off(3, 1.0)
    assert not brokers.backing_off(1, 1.0 + BROKER_BACKOFF_S)
    assert brokers.next_end(1.0) == 1.0 + BROKER_BACKOFF_S


def test_the_remote_fails_when_every_broker_routed_to_has_failed() -> None:
    brokers = three_answering()
    assert brokers.failed(1, 1.0, sent=0.5) is False
    assert brokers.failed(2, 1.0, sent=0.5) is False
    assert brokers.failed(3, 1.0, sent=0.5) is True  # a cut link: all of them
    assert brokers.remote_failed(1.0)
    brokers.answered(2, 1.5)  # one answers again: the remote is back
    assert not brokers.remote_failed(1.5)


def test_a_remote_of_one_broker_fails_with_it() -> None:
    brokers = BrokerBackoff()
    brokers.sent(1, 0.0)
    assert brokers.failed(1, 0.1, sent=0.0) is True


def test_a_broker_nothing_went_to_lately_neither_keeps_the_remote_up_nor_fails_it() -> None:
    brokers = three_answering()
    later = ROUTED_S + 1.0  # broker 3's leaders moved away: nothing went there since
    for node in (1, 2):
        brokers.sent(node, later)
    assert brokers.failed(1, later, sent=later) is False
    assert brokers.failed(2, later, sent=later) is True  # 3 is not routed to any more
    # a dead broker nothing goes to does not fail a remote whose routed brokers answer
    brokers = BrokerBackoff()
    brokers.sent(1, 0.0)
    brokers.failed(1, 0.0, sent=0.0)
    brokers.sent(2, later)
    brokers.answered(2, later)
    assert not brokers.remote_failed(later)


def test_the_back_off_doubles_up_to_its_cap_and_an_answer_ends_it() -> None:
    brokers = three_answering()
    now, lengths = 1.0, []
    for _ in range(8):
        brokers.failed(1, now, sent=now)
        end = brokers.next_end(now)
        assert end is not None
        lengths.append(round(end - now, 6))
        now = end
    assert lengths[:3] == [BROKER_BACKOFF_S, 2 * BROKER_BACKOFF_S, 4 * BROKER_BACKOFF_S]
    assert max(lengths) == BROKER_BACKOFF_MAX_S == lengths[-1]
    brokers.answered(1, now)
    brokers.failed(1, now + 1, sent=now + 1)
    assert brokers.next_end(now + 1) == now + 1 + BROKER_BACKOFF_S  # from the start again


def test_requests_out_before_a_failure_fail_with_it_without_more_back_off() -> None:
    brokers = three_answering()
    brokers.failed(1, 1.0, sent=0.5)
    brokers.failed(1, 1.01, sent=0.6)  # sent before the failure at 1.0: the same outage
    brokers.failed(1, 1.02, sent=0.7)
    assert brokers.next_end(1.0) == 1.0 + BROKER_BACKOFF_S
    brokers.failed(1, 2.0, sent=1.5)  # sent after it: a second failure in a row
    assert brokers.next_end(2.0) == 2.0 + 2 * BROKER_BACKOFF_S


def test_failing_brokers_are_those_routed_to_whose_last_request_failed() -> None:
    brokers = three_answering()
    brokers.failed(1, 1.0, sent=0.5)
    brokers.failed(2, 1.0, sent=0.5)
    assert brokers.failing(1.5) == {1, 2}
    brokers.answered(2, 2.0)
    assert brokers.failing(2.0) == {1}
    assert brokers.failing(1.0 + ROUTED_S + 0.1) == set()  # nothing went to it since
