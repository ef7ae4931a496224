"""The built wheel, installed into a fresh venv, is a working syncer.

The checkout's venv hides packaging mistakes: an editable install imports from the source
tree, and the dev extras pull in packages the product forgot to declare. So this builds the
sdist and, from it, the wheel (what ``make dist`` does), installs the wheel alone into a new
venv, and runs its ``syncer`` from a directory outside the checkout: a module or data file
left out of the wheel, or an import missing from ``dependencies``, fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import syncer
from tests.kafka_helpers import create_topic, produce, read_partition, write_config

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installed:
    """A venv holding only the wheel and its declared dependencies."""

    venv: Path
    workdir: Path  # outside the checkout, so `syncer/` there cannot shadow the install

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return subprocess.run(
            [str(self.venv / "bin" / args[0]), *args[1:]],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def checked(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}: {result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    checked(
        subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    )
    (wheel,) = dist.glob("kafka_syncer-*.whl")
    venv = root / "venv"
    checked(
        subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    )
    env = Installed(venv, root)
    checked(env.run("pip", "install", "--quiet", str(wheel), timeout=300))
    yield env


def test_the_wheel_installs_a_syncer_that_reports_its_version(installed: Installed) -> None:
    assert checked(installed.run("syncer", "--version")).startswith(
        f"syncer {syncer.__version__} (Python "
    )
    where = checked(
        installed.run(
            "python",
            "-c",
            "import importlib.metadata as m, importlib.resources as r, syncer;"
            "print(syncer.__file__);"
            "print(m.version('kafka-syncer'));"
            "print(r.files('syncer').joinpath('py.typed').is_file())",
        )
    ).split()
    assert where[0].startswith(str(installed.venv)), f"imported from the checkout: {where[0]}"
    assert where[1:] == [syncer.__version__, "True"]


async def test_the_installed_syncer_catches_up(
    installed: Installed, local: str, east: str, topic: str
) -> None:
    await create_topic(east, topic)
    await produce(east, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(300)])
    config = installed.workdir / f"{topic}.yaml"
    write_config(config, local, east, topic)
    result = installed.run("syncer", "catch-up", "-c", str(config), "--no-progress")
    checked(result)
    copied = await read_partition(local, topic)
    assert copied == await read_partition(east, topic)
    assert len(copied) == 300


def tour(readme: str) -> str:
    """The README's five-minute tour as written: its shell lines, the build and install
    lines left out (the fixture built and installed the same wheel)."""
    section = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    shell = "\n".join(re.findall(r"```sh\n(.*?)```", section, flags=re.S))
    skipped = ("make dist", "pipx install")
    return "\n".join(line for line in shell.splitlines() if not line.startswith(skipped))


def test_the_readme_tour_runs_as_written(installed: Installed, tmp_path: Path) -> None:
    """A newcomer's first run: the tour's commands, in order, with the installed wheel's
    `syncer` first on PATH. Every command must succeed (check exit 0, verify exit 0 twice),
    and the two kcat reads of one offset, local and east, must print the same line."""
    script = tour((ROOT / "README.md").read_text())
    assert "cat > tour.yaml" in script and "syncer catch-up -c tour.yaml" in script
    state = tmp_path / "tour"
    script = script.replace("/tmp/tour", str(state))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{installed.venv / 'bin'}:{env['PATH']}"
    try:
        result = subprocess.run(
            ["bash", "-c", f"set -euo pipefail\n{script}"],
            cwd=installed.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        if (state / "testbed.json").exists():
            subprocess.run(
                [str(installed.venv / "bin" / "syncer"), "testbed", "down", "--state", str(state)],
                capture_output=True,
                timeout=120,
                check=False,
            )
    out = checked(result)
    kcat = [line for line in out.splitlines() if re.fullmatch(r"2 100 \d+ \d+", line)]
    assert len(kcat) == 2 and kcat[0] == kcat[1], out
    assert out.count("identical") >= 8, out  # 4 partitions, verified twice
