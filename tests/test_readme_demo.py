"""The README's quick start, run as a reader runs it: ``make demo``'s server, then the
commands of the quick start's console block, each answering what its comment shows.

The server is ``gateway serve --config examples/gateway.toml`` as ``make demo`` runs it, in
a scratch copy of the repository's layout (so the demo's ``.demo/`` state is the test's
own) and on a free port instead of 8080. A comment line under a command is what it prints,
``...`` standing for any text.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.testing import free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.integration


def quick_start_commands() -> list[tuple[str, list[str]]]:
    """(command, the lines its comments say it prints) for the quick start's curl block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("```console\n# allowed: alice")
    block = text[start + len("```console\n") : text.index("```", start + 10)]
    commands: list[tuple[str, list[str]]] = []
    pending = ""
    for line in block.splitlines():
        if pending or line.startswith(("curl ", ".venv/bin/gateway ")):
            pending += line.removesuffix("\\") + (" " if line.endswith("\\") else "")
            if not line.endswith("\\"):
                commands.append((pending, []))
                pending = ""
        elif line.startswith("# ") and commands and line[2:3] in "{o":
            commands[-1][1].append(line[2:])
    return commands


def matches(promised: str, printed: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in promised.split("..."))
    return re.fullmatch(pattern, printed) is not None


def test_the_quick_start_block_has_commands_with_their_output() -> None:
    commands = quick_start_commands()
    assert len(commands) == 6
    assert all(promised for _, promised in commands)
    assert not matches('{"code":"denied",...} 403', '{"code":"denied"} 200')


def test_the_quick_start_commands_answer_as_the_readme_shows(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.fail("curl is needed to run the README's commands")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "bundles").symlink_to(ROOT / "bundles")
    (tmp_path / ".venv").symlink_to(Path(sys.executable).resolve().parent.parent)
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--config",
                "examples/gateway.toml",
                "--port",
                str(port),
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", server, log=log, timeout=60)
        for written, promised in quick_start_commands():
            command = written.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
            if command.startswith(".venv/bin/gateway "):
                command = f"{sys.executable} -m gateway " + command.split(" ", 1)[1]
            done = subprocess.run(
                ["bash", "-c", command],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                cwd=tmp_path,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            printed = done.stdout.splitlines()
            assert len(printed) == len(promised), (command, done.stdout, done.stderr)
            for want, got in zip(promised, printed, strict=True):
                assert matches(want, got), (command, want, got)
    finally:
        server.terminate()
        server.wait(timeout=30)
