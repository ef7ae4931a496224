"""What a reader sees is equal (invariant 7) against real brokers: a LogAppendTime remote topic
is mirrored with the append times its readers see, a local topic whose settings would
change what readers see is refused with one line, nothing written to it, and a batch whose
bytes went bad at the remote halts the partition before any of it lands, and so does a
local topic turned LogAppendTime while it is copied, at its first write so stamped (the
produce answer tells the broker's time; the topic refresh would refuse it minutes later).
Records whose headers have null values are compared like any others (a restart compares the
local log's last records with the remote's; their digest took a null value for bytes)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

from syncer.clusters import TP
from syncer.errors import ExitCode
from syncer.status import State
from syncer.testbed import Testbed
from tests.integration.test_config_sync import eventually, running
from tests.kafka_helpers import (
    CODECS,
    Rec,
    alter_topic,
    batch_layout,
    catch_up,
    create_topic,
    kcat_lines,
    make_config,
    produce,
    read_partition,
    run_cli,
    write_config,
)

TWO_DAYS_AGO = int(time.time() * 1000) - 2 * 86_400_000


def seen(records: list[Rec]) -> list[tuple[int, bytes | None, bytes | None, object, int]]:
    """What a reader sees at each offset (the timestamp type aside: it says whose clock)."""
    return [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records]


async def test_a_log_append_time_remote_is_mirrored_with_the_times_its_readers_see(
    local: str, east: str, topic: str, config_file: Path
) -> None:
    await create_topic(east, topic, **{"message.timestamp.type": "LogAppendTime"})
    for i, codec in enumerate(CODECS):  # a batch or more per codec, old CreateTime sent
        records = [(b"k%d" % j if j % 4 else None, b"v%d " % j + b"x" * 400) for j in range(60)]
        await produce(
            east,
            topic,
            records,
            codec=codec,
            headers=[("n", b"%d" % i)],
            timestamp_ms=TWO_DAYS_AGO,
            linger_ms=20,
        )
    remote = await read_partition(east, topic)
    assert len(remote) == 300 and {r.timestamp_type for r in remote} == {1}  # LogAppendTime
    assert all(r.timestamp > TWO_DAYS_AGO for r in remote)  # the broker's clock, not ours

    syncer = await catch_up(make_config(local, {"east": east}, [topic]))
    (status,) = syncer.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 300, status.error
    copied = await read_partition(local, topic)
    assert {r.timestamp_type for r in copied} == {0}  # CreateTime, at the remote's append time
    assert seen(copied) == seen(remote)
    async with syncer.local:
        settings = await syncer.local.topic_settings([topic], ["message.timestamp.type"])
    assert settings == {topic: {"message.timestamp.type": "CreateTime"}}

    write_config(config_file, local, east, topic)
    result = run_cli("verify", "-c", str(config_file), "--json")
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    (verdict,) = json.loads(result.stdout)
    assert verdict["identical"] and (verdict["from"], verdict["to"]) == (0, 300)


async def test_a_local_log_append_time_topic_is_refused_and_nothing_written(
    local: str, east: str, topic: str, config_file: Path
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"v%d" % i) for i in range(10)])
    await create_topic(local, topic, **{"message.timestamp.type": "LogAppendTime"})
    write_config(config_file, local, east, topic)
    result = run_cli("catch-up", "-c", str(config_file), "--no-progress")
    assert result.returncode == ExitCode.HALTED, result.stderr
    line = (
        f"syncer: topic {topic} refused: local message.timestamp.type is LogAppendTime, remote"
        " east's is CreateTime: the local broker would replace every record's timestamp with"
        " its own clock"
    )
    assert line in result.stderr.splitlines(), result.stderr
    assert await read_partition(local, topic) == []


async def test_a_local_topic_with_a_lower_max_message_bytes_is_refused(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic, **{"max.message.bytes": "2000000"})
    await produce(east, topic, [(b"k", b"v" * 1_500_000)], max_request_size=2_000_000)
    await create_topic(local, topic, **{"max.message.bytes": "1000000"})
    syncer = await catch_up(make_config(local, {"east": east}, [topic]))
    assert syncer.refused == {
        topic: "local max.message.bytes is 1000000, remote east's is 2000000: the local topic"
        " would refuse batches the remote holds"
    }
    assert syncer.statuses() == [] and TP(topic, 0) not in syncer.copiers
    assert await read_partition(local, topic) == []


def kcat_checked(bootstrap: str, topic: str) -> subprocess.CompletedProcess[str]:
    """kcat reading the partition with librdkafka's CRC checks on (off by default)."""
    read = ["kcat", "-C", "-e", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning"]
    return subprocess.run(
        [*read, "-X", "check.crcs=true", "-f", "%o %s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_a_batch_corrupted_at_the_remote_halts_and_none_of_it_lands(
    testbed: Testbed, local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    for first in range(0, 100, 20):  # five batches of twenty
        records = [(b"k", b"value-%03d" % i) for i in range(first, first + 20)]
        await produce(east, topic, records, linger_ms=100)
    assert [base for base, _n, _c in await batch_layout(east, topic)] == [0, 20, 40, 60, 80]
    before = kcat_lines(east, topic, 0)
    # a bit goes bad in the remote's log (its disk): the broker serves what the file holds
    segment = Path(testbed.clusters["east"].directory) / "data" / f"{topic}-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    at = data.index(b"value-050")
    data[at + 6] ^= 0x01  # "value-150"
    with segment.open("r+b") as out:
        out.seek(at + 6)
        out.write(data[at + 6 : at + 7])
    assert "50 k value-150" in kcat_lines(east, topic, 0)  # a reader that does not check
    checked = kcat_checked(east, topic)  # one that does is told
    assert "CRC" in checked.stderr or "corrupt" in checked.stderr.lower(), checked.stderr

    syncer = await catch_up(make_config(local, {"east": east}, [topic]))
    (status,) = syncer.statuses()
    assert status.state is State.HALTED, status
    assert status.error is not None and status.error.startswith(
        "from remote east: batch at offset 40 fails its CRC-32C check (stored 0x"
    ), status.error
    copied = kcat_lines(local, topic, 0)  # the batches before it, as they were, and no more
    assert copied == before[: len(copied)] and len(copied) <= 40, copied[-3:]
    assert not any("value-150" in line or "value-05" in line for line in copied)


async def test_a_local_topic_turned_log_append_time_while_copying_halts_at_its_first_write(
    local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"a%d" % i) for i in range(10)], timestamp_ms=TWO_DAYS_AGO)
    topics = {"include": [topic], "refresh_interval_s": 600}  # no refresh refuses it first
    async with running(make_config(local, {"east": east}, [topic], topics=topics)) as syncer:
        await eventually(lambda: [s.local_end for s in syncer.statuses()] == [10], "a copy")
        (status,) = syncer.statuses()
        await alter_topic(local, topic, {"message.timestamp.type": "LogAppendTime"})
        await asyncio.sleep(1)  # the local broker takes the change from its metadata log
        records = [(b"k", b"b%d" % i) for i in range(10)]
        await produce(east, topic, records, timestamp_ms=TWO_DAYS_AGO, linger_ms=100)
        took = await eventually(lambda: status.state is State.HALTED, "the halt", 20)
    assert took < 20 and status.error is not None, status.error
    assert status.error.startswith(
        f"{topic}[0]: the write of offsets 10..19 landed stamped with the local broker's time ("
    ), status.error
    copied, remote = await read_partition(local, topic), await read_partition(east, topic)
    assert seen(copied[:10]) == seen(remote[:10])  # before the change: as the source's
    assert {r.timestamp_type for r in copied[10:]} == {1}  # what the halt names
    assert {r.timestamp for r in remote[10:]} == {TWO_DAYS_AGO}


async def test_records_with_null_header_values_are_compared_after_a_restart(
    local: str, east: str, topic: str, config_file: Path
) -> None:
    await create_topic(east, topic)
    headers: list[tuple[str, bytes | None]] = [("trace", None), ("kind", b"")]
    await produce(east, topic, [(b"k", b"a%d" % i) for i in range(10)], headers=headers)
    config = make_config(local, {"east": east}, [topic])
    first = await catch_up(config)
    assert [s.state for s in first.statuses()] == [State.CAUGHT_UP]
    await produce(east, topic, [(b"k", b"b%d" % i) for i in range(10)], headers=headers)
    again = await catch_up(config)  # compares the local log's last records with the remote's
    (status,) = again.statuses()
    assert status.state is State.CAUGHT_UP and status.local_end == 20, status.error
    copied = await read_partition(local, topic)
    assert seen(copied) == seen(await read_partition(east, topic))
    assert {r.headers for r in copied} == {(("trace", None), ("kind", b""))}
    write_config(config_file, local, east, topic)
    result = run_cli("verify", "-c", str(config_file), "--json")
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    (verdict,) = json.loads(result.stdout)
    assert verdict["identical"] and (verdict["from"], verdict["to"]) == (0, 20)
