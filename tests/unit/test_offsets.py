"""Which consumer group offsets are committed locally, over plain values."""

from __future__ import annotations

from syncer.clusters import TP
from syncer.config import Config
from syncer.offsets import offsets_to_commit

A, B, C, D = (TP("orders", p) for p in range(4))


def test_offsets_are_committed_unchanged_only_where_local_reaches_them() -> None:
    remote = {A: 40, B: 100, C: 7, D: 5}
    local_committed = {C: 9, D: 5}  # C: the group went further locally; D: already there
    local_ends = {A: 60, B: 90, C: 60, D: 60}  # B: local has not got to 100 yet
    assert offsets_to_commit(remote, local_committed, local_ends) == {A: 40}


def test_partitions_not_mirrored_are_left_alone() -> None:
    assert offsets_to_commit({TP("other", 0): 3}, {}, {A: 10}) == {}


def test_group_selection_by_regex() -> None:
    config = Config.from_dict(
        {
            "local": {"bootstrap_servers": "l:9092"},
            "remotes": [{"name": "east", "bootstrap_servers": "e:9092"}],
            "topics": {"include": ["orders"]},
            "groups": {"include": ["billing-.*", "audit"], "exclude": ["billing-test"]},
        }
    )
    assert config.groups.selects("billing-eu") and config.groups.selects("audit")
    assert not config.groups.selects("billing-test") and not config.groups.selects("other")
