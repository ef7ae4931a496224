"""``syncer check``'s verdicts on plain values: each rule's OK, WARN and FAIL, and the
authorized-operations request and answer as Kafka lays them out."""

from __future__ import annotations

import json
import uuid

import pytest
from aiokafka.protocol.admin import DescribeGroupsResponse_v3

from syncer.check import (
    LOCAL_TOPIC_NEEDS,
    REMOTE_TOPIC_NEEDS,
    Level,
    Line,
    acl_line,
    ahead_line,
    broker_lines,
    create_line,
    exit_code,
    idempotent_line,
    plan_lines,
    principal_of,
    print_lines,
    producer_state_line,
    reach_line,
    same_cluster_line,
    settings_line,
    timestamp_line,
    version_line,
)
from syncer.cluster_ids import shares_a_topic
from syncer.config import ClusterConfig, TopicsConfig
from syncer.errors import ExitCode
from syncer.protocol import NO_ID, MetadataRequest_v10, MetadataResponse_v10
from syncer.protocol.acl import (
    NOT_PROVIDED,
    AuthorizedOperationsRequest,
    GroupOperationsRequest,
    GroupOperationsRequest_v3,
    Operation,
    authorized_of,
    granted,
    group_operations_of,
)
from syncer.protocol.versions import release_guess, write_implies_idempotent
from syncer.topics import plan_topics

ALL = frozenset(Operation)
NEW = {0: (3, 13), 1: (4, 18), 2: (1, 10), 3: (0, 13), 22: (0, 6)}  # a Kafka 4.1 broker


def bits(*ops: Operation) -> int:
    return sum(1 << op for op in ops)


# the request and its answer ------------------------------------------------------------------


def test_the_request_asks_topic_and_cluster_operations_and_creates_nothing() -> None:
    request = AuthorizedOperationsRequest(["t"]).build(MetadataRequest_v10)
    encoded = request.encode()
    # ... topic's tagged fields, allow_auto_topic_creation, cluster ops, topic ops, tags
    assert encoded.endswith(b"\x00" + b"\x00\x01\x01" + b"\x00")


def test_granted_reads_kafkas_acl_operation_bits() -> None:
    assert granted(bits(Operation.READ, Operation.IDEMPOTENT_WRITE)) == {
        Operation.READ,
        Operation.IDEMPOTENT_WRITE,
    }
    assert granted(0) == frozenset()
    assert granted(NOT_PROVIDED) is None  # the broker did not fill it


def test_the_answer_gives_each_topics_operations_and_the_clusters() -> None:
    response = MetadataResponse_v10(
        0,
        [(1, "localhost", 9092, None, {})],
        "cluster",
        1,
        [
            (0, "t", NO_ID, False, [], bits(Operation.READ, Operation.WRITE), {}),
            (29, "denied", NO_ID, False, [], NOT_PROVIDED, {}),
        ],
        bits(Operation.DESCRIBE),
        {},
    )
    found = authorized_of(MetadataResponse_v10.decode(response.encode()))
    assert found.topics["t"] == (0, {Operation.READ, Operation.WRITE})
    assert found.topics["denied"] == (29, None)
    assert found.cluster == {Operation.DESCRIBE}


def test_a_group_answer_is_read_with_its_authorized_operations() -> None:
    request = GroupOperationsRequest(["g"]).build(GroupOperationsRequest_v3)
    assert request.encode().endswith(b"\x01")  # include_authorized_operations
    # the answer the request is paired with carries the field (aiokafka's v3 pairs v2's)
    assert request.RESPONSE_TYPE is DescribeGroupsResponse_v3
    response = DescribeGroupsResponse_v3(
        0,
        [
            (0, "g", "Empty", "consumer", "", [], bits(Operation.READ, Operation.DESCRIBE)),
            (30, "denied", "", "", "", [], NOT_PROVIDED),
        ],
    )
    found = group_operations_of(DescribeGroupsResponse_v3.decode(response.encode()))
    assert found == {"g": (0, {Operation.READ, Operation.DESCRIBE}), "denied": (30, None)}


# clusters ----------------------------------------------------------------------------------


def test_a_cluster_that_refuses_us_fails_with_its_error() -> None:
    line = reach_line("local", "SASL_SSL", "local cluster 'local': authentication failed")
    assert line.level is Level.FAIL and "authentication failed" in line.detail
    assert reach_line("local", "SASL_SSL", None).level is Level.OK


def test_a_remote_with_the_local_clusters_id_and_topic_fails_and_an_untold_id_passes() -> None:
    line = same_cluster_line("remote east", "Lx5", "Lx5", True)
    assert line is not None and line.level is Level.FAIL
    assert line.detail == "is the local cluster itself (cluster id Lx5) under another address"
    assert same_cluster_line("remote east", "Lx5", "Rq2", True) is None
    assert same_cluster_line("remote east", None, None, False) is None  # before 2.8: untold
    assert same_cluster_line("remote east", "Lx5", None, False) is None


def test_one_cluster_id_without_a_shared_topic_only_warns() -> None:
    """Two clusters made from one compose file share its CLUSTER_ID: a correct setup."""
    line = same_cluster_line("remote east", "Lx5", "Lx5", False)
    assert line is not None and line.level is Level.WARN
    assert "two clusters made with one cluster id?" in line.detail


def test_a_topic_shared_is_one_name_with_one_id() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    assert shares_a_topic({"t": a, "u": b}, {"t": a})
    assert not shares_a_topic({"t": a}, {"t": b})  # the same name, created twice
    assert not shares_a_topic({"t": a}, {"u": a})
    assert not shares_a_topic(None, {"t": a}) and not shares_a_topic({"t": a}, {})


def test_the_version_line_guesses_the_release_and_fails_below_the_floor() -> None:
    line = version_line("remote east", NEW)
    assert line.level is Level.OK and line.detail.startswith("Kafka 4.1+ (Produce v13, Fetch v18")
    old = {0: (0, 7), 1: (0, 10), 2: (0, 5), 22: (0, 1)}  # Kafka 2.1–2.2
    failed = version_line("remote east", old)
    assert failed.level is Level.FAIL and "Fetch up to v10, needs v11" in failed.detail


@pytest.mark.parametrize(
    ("versions", "release"),
    [
        ({0: (0, 13), 1: (0, 17), 2: (0, 9), 3: (0, 12)}, "4.1+"),
        ({0: (0, 9), 1: (0, 13), 2: (0, 7), 3: (0, 12)}, "3.1+"),
        ({0: (0, 9), 1: (0, 12), 2: (0, 7), 3: (0, 11)}, "3.0+"),
        ({0: (0, 8), 1: (0, 12), 2: (0, 6), 3: (0, 10)}, "2.8+"),
        ({0: (0, 8), 1: (0, 11), 2: (0, 5), 3: (0, 9)}, "2.3+"),
    ],
)
def test_the_release_is_told_by_the_newest_request_versions(
    versions: dict[int, tuple[int, int]], release: str
) -> None:
    assert release_guess(versions) == release
    assert write_implies_idempotent(versions) is (release not in ("2.8+", "2.3+"))


# ACLs --------------------------------------------------------------------------------------


def test_a_missing_operation_fails_naming_the_acl() -> None:
    ops = frozenset({Operation.DESCRIBE, Operation.READ, Operation.DESCRIBE_CONFIGS})
    line = acl_line("local", "topic t", "User:limited", LOCAL_TOPIC_NEEDS, ops)
    assert line == Line(
        Level.FAIL, "local", "acl", "missing ACL: ALLOW User:limited WRITE on topic t"
    )
    assert acl_line("local", "topic t", "User:x", LOCAL_TOPIC_NEEDS, ALL).level is Level.OK


def test_a_topic_the_principal_may_not_describe_fails() -> None:
    line = acl_line("remote east", "topic t", "User:x", REMOTE_TOPIC_NEEDS, None, 29)
    assert line.level is Level.FAIL
    assert line.detail == (
        "missing ACL: User:x may not DESCRIBE topic t (needs DESCRIBE/READ/DESCRIBE_CONFIGS)"
    )
    group = acl_line("local", "group g", "User:x", (Operation.READ,), None, 30)
    assert group.level is Level.FAIL and "DESCRIBE group g" in group.detail


def test_operations_the_broker_did_not_report_warn() -> None:
    line = acl_line("local", "topic t", "User:x", LOCAL_TOPIC_NEEDS, None)
    assert line.level is Level.WARN


def test_a_topic_to_create_fails_when_the_broker_would_refuse_it() -> None:
    refused = create_line("local", "t", "User:x", "TopicAuthorizationFailedError")
    assert refused.level is Level.FAIL
    assert "missing ACL: ALLOW User:x CREATE on topic t (or the cluster)" in refused.detail
    assert create_line("local", "t", "User:x", None).level is Level.OK


def test_idempotent_writes_need_the_cluster_acl_or_write_on_kafka_3() -> None:
    cluster = frozenset({Operation.IDEMPOTENT_WRITE})
    assert idempotent_line("local", "User:x", cluster, False, False).level is Level.OK
    # Kafka 3.0+: WRITE on the topics is enough (KIP-679)
    assert idempotent_line("local", "User:x", frozenset(), True, True).level is Level.OK
    before = idempotent_line("local", "User:x", frozenset({Operation.DESCRIBE}), True, False)
    assert before.level is Level.FAIL
    assert before.detail == "missing ACL: ALLOW User:x IDEMPOTENT_WRITE on the cluster"
    # not told: the cluster's operations are given only to a principal with DESCRIBE on it
    assert idempotent_line("local", "User:x", None, True, False).level is Level.WARN


def test_the_principal_is_named_from_the_settings() -> None:
    sasl = ClusterConfig("b:9092", security_protocol="SASL_SSL", sasl_username="mirror")
    assert principal_of(sasl) == "User:mirror"
    assert principal_of(ClusterConfig("b:9092")) == "User:ANONYMOUS"
    tls = ClusterConfig("b:9092", security_protocol="SSL", ssl_certfile="/c.pem")
    assert principal_of(tls) == "the subject of /c.pem"


# topics ------------------------------------------------------------------------------------


def test_partition_counts_that_differ_fail_and_a_topic_to_create_is_ok() -> None:
    plan = plan_topics(TopicsConfig(include=("t.*",)), {"t1": 3}, {"east": {"t1": 4, "t2": 2}})
    lines = {li.where: li for li in plan_lines(plan)}
    assert lines["topic t1"].level is Level.FAIL
    assert "local has 3, remote has 4" in lines["topic t1"].detail
    assert lines["topic t2"].level is Level.OK and "created with 2" in lines["topic t2"].detail


def test_a_local_setting_that_breaks_fidelity_fails_naming_it() -> None:
    local = {"message.timestamp.type": "LogAppendTime"}
    remote = {"east": {"message.timestamp.type": "CreateTime"}}
    line = settings_line("t", local, remote, fills=False)
    assert line.level is Level.FAIL
    assert line.detail.startswith("local message.timestamp.type is LogAppendTime")
    small = settings_line(
        "t", {"max.message.bytes": "1000"}, {"e": {"max.message.bytes": "2000"}}, False
    )
    assert small.level is Level.FAIL and "max.message.bytes" in small.detail


def test_a_compacted_remote_warns_unless_its_holes_are_filled() -> None:
    remote = {"east": {"cleanup.policy": "compact"}}
    local = {"cleanup.policy": "compact"}
    assert settings_line("t", local, remote, fills=False).level is Level.WARN
    assert settings_line("t", local, remote, fills=True).level is Level.OK


# local broker settings ------------------------------------------------------------------------


def test_broker_settings_that_weaken_the_guarantees_warn() -> None:
    weak = {
        "unclean.leader.election.enable": "true",
        "min.insync.replicas": "1",
        "auto.create.topics.enable": "true",
    }
    lines = broker_lines(weak, replication_factor=3)
    assert [li.level for li in lines] == [Level.WARN] * 3
    named = " ".join(li.detail for li in lines)
    for setting in weak:
        assert f"{setting}=" in named
    # one replica: min.insync.replicas=1 is all there can be
    assert [li.detail.split("=")[0] for li in broker_lines(weak, 1)] == [
        "unclean.leader.election.enable",
        "auto.create.topics.enable",
    ]
    safe = {"unclean.leader.election.enable": "false", "min.insync.replicas": "2"}
    assert [li.level for li in broker_lines(safe, 3)] == [Level.OK]


def test_records_older_than_the_producer_state_expiry_warn() -> None:
    day, now = 86_400_000, 10 * 86_400_000
    assert producer_state_line(day, now - 3_600_000, now).level is Level.OK
    old = producer_state_line(day, now - 2 * day, now)
    assert old.level is Level.WARN and "48.0 h old" in old.detail
    assert producer_state_line(None, now, now).level is Level.WARN  # unreadable
    assert producer_state_line(day, None, now).level is Level.OK  # nothing to copy


# ahead ------------------------------------------------------------------------------------


def test_data_lost_at_the_source_fails() -> None:
    line = ahead_line("t[0]", 10, 50, 20, None, None)
    assert line is not None and line.level is Level.FAIL
    assert line.detail == "data lost at the source: local ends at 10, the remotes start at 20"


def test_a_hole_ahead_fails_and_a_partial_scan_says_how_far_it_looked() -> None:
    hole = ahead_line("t[0]", 0, 100, None, "hole at offset 7: transaction marker", 8)
    assert hole is not None and hole.level is Level.FAIL and "offset 7" in hole.detail
    partial = ahead_line("t[0]", 0, 100, None, None, 40)
    assert partial is not None and partial.level is Level.OK
    assert partial.detail == "none in 0..40 (first fetch only) of 0..100"
    assert ahead_line("t[0]", 5, 5, None, None, None) is None  # in sync: nothing to say


# the whole ---------------------------------------------------------------------------------


def test_a_fail_anywhere_is_exit_10_and_warnings_are_not() -> None:
    ok, warn = Line(Level.OK, "a", "b", "c"), Line(Level.WARN, "a", "b", "c")
    assert exit_code([ok, warn]) == ExitCode.OK
    assert exit_code([ok, Line(Level.FAIL, "a", "b", "c")]) == ExitCode.CHECK_FAILED == 10


def test_the_json_output_is_one_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    print_lines([Line(Level.FAIL, "local", "acl", "missing ACL")], as_json=True)
    assert json.loads(capsys.readouterr().out) == [
        {"level": "FAIL", "where": "local", "what": "acl", "detail": "missing ACL"}
    ]
    print_lines([Line(Level.WARN, "local", "x", "y")], as_json=False)
    assert "0 OK, 1 WARN, 0 FAIL" in capsys.readouterr().out


def test_timestamp_bounds_that_refuse_a_record_to_copy_fail() -> None:
    hour, now = 3_600_000, 1_800_000_000_000
    day = {"message.timestamp.before.max.ms": str(24 * hour)}
    old = timestamp_line("t", day, now - 30 * hour, now - 30 * hour, now)
    assert old is not None and old.level is Level.FAIL and "30.0 h old" in old.detail
    assert timestamp_line("t", day, now - 20 * hour, now, now) is None
    ahead = {"message.timestamp.after.max.ms": str(hour)}
    line = timestamp_line("t", ahead, now, now + 2 * hour, now)
    assert line is not None and "2.0 h ahead" in line.detail
    # before Kafka 3.6 one bound both ways; since, it applies only where before / after is
    # not set (Long.MAX), as Kafka's LogConfig reads them
    both = {"message.timestamp.difference.max.ms": str(hour)}
    assert timestamp_line("t", both, now - 2 * hour, now, now) is not None
    assert timestamp_line("t", both, now, now + 2 * hour, now) is not None
    unset = {**both, "message.timestamp.before.max.ms": str(2**63 - 1)}
    assert timestamp_line("t", unset, now - 2 * hour, now, now) is not None
    widened = {**both, "message.timestamp.before.max.ms": str(30 * 24 * hour)}
    assert timestamp_line("t", widened, now - 2 * hour, now, now) is None
    assert timestamp_line("t", {}, now - 1000 * hour, now + 1000 * hour, now) is None
    assert timestamp_line("t", day, None, None, now) is None  # nothing to copy
