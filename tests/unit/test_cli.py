"""What the command line does with errors that end a command: one line, the documented code."""

from __future__ import annotations

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
