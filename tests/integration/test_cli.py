"""Bad input gets one clear line and a documented exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from syncer.errors import ExitCode
from syncer.testbed.bed import free_port
from tests.kafka_helpers import create_topic, produce, produce_transactions, run_cli


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_malformed_yaml(config_file: Path) -> None:
    config_file.write_text("local: {bootstrap_servers: [1\n")
    result = run_cli("catch-up", "-c", str(config_file))
    assert result.returncode == ExitCode.CONFIG
    assert one_line(result).startswith(f"syncer: {config_file}: malformed YAML: line ")


def test_unknown_key_and_missing_field_together(config_file: Path) -> None:
    config_file.write_text(
        "local: {bootstrap_servers: 'a:1'}\nremotes: [{name: east}]\n"
        "topics: {include: ['x']}\nspeed: 11\n"
    )
    result = run_cli("run", "-c", str(config_file))
    assert result.returncode == ExitCode.CONFIG
    line = one_line(result)
    assert "speed: unknown key" in line and "remotes[0].bootstrap_servers: required" in line


def test_missing_config_file(tmp_path: Path) -> None:
    result = run_cli("plan", "-c", str(tmp_path / "nope.yaml"))
    assert result.returncode == ExitCode.CONFIG
    assert "cannot read" in one_line(result)


def test_missing_tls_file_and_a_remote_that_is_local(config_file: Path) -> None:
    config_file.write_text(
        "local: {bootstrap_servers: 'a:1'}\n"
        "remotes:\n"
        "  - {name: east, bootstrap_servers: 'a:1'}\n"
        "  - {name: west, bootstrap_servers: 'b:1', security_protocol: SSL,"
        " ssl_cafile: /nope/ca.pem}\n"
        "topics: {include: ['x']}\n"
    )
    result = run_cli("catch-up", "-c", str(config_file))
    assert result.returncode == ExitCode.CONFIG
    line = one_line(result)
    assert "remotes[1].ssl_cafile: no such file: /nope/ca.pem" in line
    assert "remotes[0].bootstrap_servers: is the local cluster" in line


def test_unreachable_bootstrap(config_file: Path, east: str) -> None:
    dead = f"127.0.0.1:{free_port()}"
    config_file.write_text(
        f"local: {{bootstrap_servers: '{dead}'}}\n"
        f"remotes: [{{name: east, bootstrap_servers: '{east}'}}]\ntopics: {{include: ['x']}}\n"
    )
    result = run_cli("catch-up", "-c", str(config_file))
    assert result.returncode == ExitCode.UNREACHABLE
    assert one_line(result).startswith(f"syncer: local cluster 'local' at {dead} is unreachable")


async def test_partition_mismatch_and_halted_exit_codes(
    config_file: Path, local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic, 2)
    await create_topic(local, topic, 1)
    config_file.write_text(
        f"local: {{bootstrap_servers: '{local}'}}\n"
        f"remotes: [{{name: east, bootstrap_servers: '{east}'}}]\n"
        f"topics: {{include: ['{topic}']}}\n"
    )
    result = run_cli("catch-up", "-c", str(config_file))
    assert result.returncode == ExitCode.HALTED
    assert (
        f"topic {topic} refused: partition counts differ: local has 1, remote has 2"
        in result.stderr
    )
    plan = run_cli("plan", "-c", str(config_file), "--json")
    assert plan.returncode == 0 and "refused: partition counts differ" in plan.stdout


async def test_catch_up_exits_halted_on_a_hole(
    config_file: Path, local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"v")] * 3)
    await produce_transactions(east, topic, [(True, [(None, b"x")])])
    config_file.write_text(
        f"local: {{bootstrap_servers: '{local}'}}\n"
        f"remotes: [{{name: east, bootstrap_servers: '{east}'}}]\n"
        f"topics: {{include: ['{topic}']}}\n"
    )
    result = run_cli("catch-up", "-c", str(config_file), "--no-progress")
    assert result.returncode == ExitCode.HALTED
    assert f"{topic}[0]: hole at offset 4: transaction marker" in result.stderr


async def test_daemon_drains_on_sigterm_and_prints_one_summary(
    config_file: Path, local: str, east: str, topic: str
) -> None:
    import asyncio
    import signal
    import time

    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"v")] * 50)
    config_file.write_text(
        f"local: {{bootstrap_servers: '{local}'}}\n"
        f"remotes: [{{name: east, bootstrap_servers: '{east}'}}]\n"
        f"topics: {{include: ['{topic}']}}\n"
        "http: {listen: '127.0.0.1:0'}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "syncer", "run", "-c", str(config_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    await asyncio.sleep(4)
    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == ExitCode.OK, err
    assert time.monotonic() - started < 10
    summary = [line for line in err.splitlines() if line.startswith("summary ◆")]
    assert len(summary) == 1, err
    assert "◆ 1 partitions ◆ 50 records ◆" in summary[0] and "◆ 0 halted ◆" in summary[0]


async def test_json_logs_and_a_watched_status(
    config_file: Path, local: str, east: str, topic: str
) -> None:
    import json
    import signal
    import time

    await create_topic(east, topic)
    await produce(east, topic, [(b"k", b"v")] * 20)
    config_file.write_text(
        f"local: {{bootstrap_servers: '{local}'}}\n"
        f"remotes: [{{name: east, bootstrap_servers: '{east}'}}]\n"
        f"topics: {{include: ['{topic}']}}\n"
        "http: {listen: ''}\n"
    )
    result = run_cli("--log-format", "json", "-v", "catch-up", "-c", str(config_file))
    assert result.returncode == 0, result.stderr
    *events, summary = result.stderr.strip().splitlines()
    assert summary.startswith("summary ◆ 1 partitions ◆ 20 records")
    entries = [json.loads(line) for line in events]  # every log line is one JSON object
    assert entries and {"time", "level", "logger", "message"} <= set(entries[0])
    assert any(topic in e["message"] for e in entries)

    watching = subprocess.Popen(
        [sys.executable, "-m", "syncer", "status", "-c", str(config_file), "--watch", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal sends it: a test run started in the background (``make test
        # &``) ignores SIGINT, and a child keeps that (it hung here, and its leftover
        # process failed the next test)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(4)
    watching.send_signal(signal.SIGINT)
    try:
        out, err = watching.communicate(timeout=30)
    finally:
        if watching.poll() is None:  # never left running for a later test to find
            watching.kill()
            watching.communicate()
    assert watching.returncode == 0, err
    assert "records/s" in out and topic in out
