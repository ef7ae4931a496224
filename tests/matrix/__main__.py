"""``python -m tests.matrix [PYTEST ARGS]``: the version matrix without make — the 2.8.2
pairing (tests/integration/test_versions.py) and every pairing here, one after the other.
Not part of ``make test``: each module starts brokers of other Kafka versions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent
MATRIX = [str(TESTS / "integration" / "test_versions.py"), str(TESTS / "matrix")]

if __name__ == "__main__":
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *MATRIX, *sys.argv[1:]]))
