"""What the command line does with errors that end a command: one line, the documented code."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from syncer import cli
from syncer.errors import ExitCode, TransientClusterError


def test_a_cluster_that_stopped_answering_is_unreachable_not_a_bug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def verify(args: object) -> int:  # its retries spent against a cluster that went away
        raise TransientClusterError("east: metadata: no answer from node 1: NodeNotReadyError")

    monkeypatch.setattr(cli, "_verify", verify)
    assert cli.main(["verify", "-c", "unused.yaml"]) == ExitCode.UNREACHABLE
    err = capsys.readouterr().err
    assert err == "syncer: east: metadata: no answer from node 1: NodeNotReadyError\n"


def test_a_test_bed_error_is_one_line_and_its_own_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["testbed", "status", "--state", str(tmp_path)]) == ExitCode.TESTBED
    assert capsys.readouterr().err == f"syncer: no test bed state at {tmp_path / 'testbed.json'}\n"


@pytest.mark.parametrize("bad", ["0", "-5", "many"])
def test_testbed_fill_refuses_a_count_below_one_as_usage(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.build_parser().parse_args(["testbed", "fill", "east", "--topic", "t", "--records", bad,
                                   "--state", "/tmp/bed"])  # fmt: skip
    assert stopped.value.code == 2
    assert "--records" in capsys.readouterr().err


def test_a_second_signal_stops_a_hung_start_at_once_in_one_line(tmp_path: Path) -> None:
    """The local cluster accepts the connection and never answers: the first signal (SIGTERM)
    asks for a drain that the start holds up, a second (SIGHUP: a closed terminal) stops at
    once, in one line and exit 130, not a traceback."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        config = tmp_path / "syncer.yaml"
        config.write_text(
            f"local: {{bootstrap_servers: '127.0.0.1:{port}', request_timeout_ms: 60000}}\n"
            f"remotes: [{{name: east, bootstrap_servers: '127.0.0.1:{port + 1}'}}]\n"
            "topics: {include: [x]}\nhttp: {listen: ''}\n"
        )
        command = [sys.executable, "-m", "syncer", "run", "-c", str(config)]
        proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        try:
            silent.settimeout(30)
            connection, _ = silent.accept()  # it is starting: its handlers are in place
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert proc.poll() is None  # draining: the start still waits for the cluster
            proc.send_signal(signal.SIGHUP)
            _, err = proc.communicate(timeout=20)
            connection.close()
        finally:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "syncer: stopped at once by a second signal: writes in flight may have landed or not;"
        " the next start reads the local ends and checks them"
    )


def test_an_http_listen_host_that_does_not_resolve_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "syncer.yaml"
    config.write_text(
        "local: {bootstrap_servers: '127.0.0.1:1'}\n"
        "remotes: [{name: east, bootstrap_servers: '127.0.0.1:2'}]\n"
        "topics: {include: [x]}\nhttp: {listen: 'nosuchhost.invalid:9700'}\n"
    )
    assert cli.main(["run", "-c", str(config)]) == ExitCode.CONFIG
    err = capsys.readouterr().err.strip()
    assert err.startswith("syncer: http.listen: cannot listen on nosuchhost.invalid:9700: ")
    assert "Unknown error" not in err and len(err.splitlines()) == 1
