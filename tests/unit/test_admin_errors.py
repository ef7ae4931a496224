"""Which admin failures a daemon waits out: a cluster that is away (a connection lost or
refused, a node not ready, a timeout) is tried again; a refusal that stays one (a policy, a
bad setting) is not."""

from __future__ import annotations

import pytest
from aiokafka import errors as kafka_errors

from syncer.admin import _failed
from syncer.errors import ClusterError, TransientClusterError


@pytest.mark.parametrize(
    "cause",
    [
        kafka_errors.KafkaConnectionError("Connection at 127.0.0.1:1 closed"),
        kafka_errors.NodeNotReadyError("node 1"),
        kafka_errors.RequestTimedOutError(),
        kafka_errors.NotControllerError(),
        ConnectionRefusedError(111, "refused"),
    ],
)
def test_a_cluster_away_is_tried_again(cause: BaseException) -> None:
    error = _failed("local: creating topics failed", cause)
    assert isinstance(error, TransientClusterError) and error.retriable


@pytest.mark.parametrize(
    "cause",
    [kafka_errors.PolicyViolationError(), kafka_errors.InvalidConfigurationError()],
)
def test_a_refusal_that_stays_is_not(cause: BaseException) -> None:
    error = _failed("local: creating topic 't' failed: policy", cause)
    assert type(error) is ClusterError and not error.retriable
    assert str(error) == "local: creating topic 't' failed: policy"
