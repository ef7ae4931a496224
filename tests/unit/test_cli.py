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


@pytest.mark.parametrize("bad", ["0", "-5", "many"])
def test_testbed_fill_refuses_a_count_below_one_as_usage(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.build_parser().parse_args(["testbed", "fill", "east", "--topic", "t", "--records", bad,
                                   "--state", "/tmp/bed"])  # fmt: skip
    assert stopped.value.code == 2
    assert "--records" in capsys.readouterr().err
