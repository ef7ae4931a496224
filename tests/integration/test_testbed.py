"""The test bed itself: real brokers answer, data of every kind round-trips, the CLI leaves
no Java process behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

from syncer.testbed.probe import probe_metadata
from tests.kafka_helpers import (
    batch_layout,
    create_topic,
    produce_every_kind,
    read_partition,
    run_cli,
)


async def test_every_kind_of_record_round_trips(east: str, topic: str) -> None:
    await create_topic(east, topic)
    written = await produce_every_kind(east, topic)
    records = await read_partition(east, topic)
    assert [r.offset for r in records] == list(range(written))
    by_key = {r.key: r for r in records}
    assert by_key[None].value == b"no key"
    assert by_key[b"no value"].value is None
    assert by_key[b"h"].headers == (("trace", b"abc"), ("empty", b""), ("dup", b"1"), ("dup", b"2"))
    assert by_key[b"t"].timestamp == 1_500_000_000_000
    assert len(by_key[b"large"].value or b"") == 256 * 3500
    codecs = {codec for _base, _count, codec in await batch_layout(east, topic)}
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}


def test_cli_up_status_down_leaves_no_java(tmp_path: Path) -> None:
    state = tmp_path / "bed"
    up = run_cli("testbed", "up", "--clusters", "a,b", "--state", str(state))
    assert up.returncode == 0, up.stderr
    try:
        bootstraps = [line.split("\t")[1] for line in up.stdout.splitlines()]
        assert len(bootstraps) == 2
        assert all(probe_metadata(b) for b in bootstraps)
        status = run_cli("testbed", "status", "--state", str(state), "--json")
        assert status.returncode == 0, status.stderr
        assert '"answers": true' in status.stdout
    finally:
        down = run_cli("testbed", "down", "--state", str(state))
    assert down.returncode == 0, down.stderr
    ours = subprocess.run(
        ["pgrep", "-f", f"syncer.testbed.dir={state}"], capture_output=True, text=True, check=False
    )
    assert ours.stdout.strip() == ""
    assert not any(probe_metadata(b, timeout=2.0) for b in bootstraps)


def test_a_broker_that_cannot_start_is_named_with_its_log(tmp_path: Path) -> None:
    import socket

    import pytest

    from syncer.testbed import ClusterSpec, Testbed, TestbedError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        bed = Testbed(tmp_path / "bed")
        with pytest.raises(TestbedError) as caught:
            bed.up([ClusterSpec("busy", port=port)])
    message = str(caught.value)
    assert "Kafka cluster 'busy'" in message
    assert str(tmp_path / "bed" / "busy" / "broker.log") in message
    assert not bed.clusters["busy"].is_running()
