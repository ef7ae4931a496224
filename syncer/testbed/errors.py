"""The test bed's one error. Not part of syncer's error tree (``syncer.errors``): the bed is
a tool for tests, benchmarks and demos, not what the product raises."""

from __future__ import annotations

from typing import ClassVar

from syncer.errors import ExitCode


class TestbedError(Exception):
    """The test bed could not do what was asked (Java or Maven missing, broker down)."""

    __test__ = False  # not a pytest test class
    exit_code: ClassVar[int] = ExitCode.TESTBED
