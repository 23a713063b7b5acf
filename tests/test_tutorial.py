"""docs/tutorial.md, run as written: every ``$`` line of its console blocks runs, in order,
in a scratch folder, and prints what the lines under it show; its file edits are applied
as the page says.

A line of expected output may hold ``...`` (any text); a line of only ``...`` stands for any
number of lines. ``export NAME=value`` lines (also inside a command's output, which the
reader pastes) set the environment of the next commands; a command ending in `` &`` is
started in the background and stopped at the end. The page's port 8080 becomes a free one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import find_opa_binary, free_port

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"
_EDIT = re.compile(r"<!-- tutorial: (append|merge|replace) (\S+) -->\n```\w+\n(.*?)```", re.S)
_CONSOLE = re.compile(r"```console\n(.*?)```", re.S)

pytestmark = pytest.mark.integration


@dataclass
class Step:
    kind: str  # "run", "append", "merge", "replace"
    text: str
    target: str = ""
    expected: list[str] = field(default_factory=list)


def steps() -> list[Step]:
    text = TUTORIAL.read_text(encoding="utf-8")
    found: list[tuple[int, Step]] = []
    for match in _EDIT.finditer(text):
        found.append((match.start(), Step(match.group(1), match.group(3), match.group(2))))
    for match in _CONSOLE.finditer(text):
        offset = match.start()
        for line in match.group(1).splitlines():
            if line.startswith("$ "):
                found.append((offset, Step("run", line[2:])))
                offset += 1
            elif found and found[-1][1].kind == "run":
                found[-1][1].expected.append(line)
    return [step for _, step in sorted(found, key=lambda pair: pair[0])]


def matches(expected: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` lines fit ``expected`` (``...`` in a line, or a line of it)."""
    if not expected:
        return not printed
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, printed[i:]) for i in range(len(printed) + 1))
    if not printed:
        return False
    pattern = ".*".join(re.escape(part) for part in head.split("..."))
    return re.fullmatch(pattern, printed[0]) is not None and matches(rest, printed[1:])


def merge(into: Any, extra: Any) -> Any:
    if isinstance(into, dict) and isinstance(extra, dict):
        for key, value in extra.items():
            into[key] = merge(into[key], value) if key in into else value
        return into
    if isinstance(into, list) and isinstance(extra, list):
        return into + [item for item in extra if item not in into]
    return extra


def apply_edit(folder: Path, step: Step) -> None:
    path = folder / step.target
    if step.kind == "append":
        path.write_text(path.read_text(encoding="utf-8") + "\n\n" + step.text, encoding="utf-8")
    elif step.kind == "merge":
        document = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(merge(document, json.loads(step.text)), indent=2), "utf-8")
    else:
        old = [line[1:] for line in step.text.splitlines() if line.startswith("-")]
        new = [line[1:] for line in step.text.splitlines() if line.startswith("+")]
        text = path.read_text(encoding="utf-8")
        block = "\n".join(old) + "\n"
        assert block in text, f"{step.target} has no lines {old}"
        path.write_text(text.replace(block, "\n".join(new) + "\n"), encoding="utf-8")


@pytest.fixture
def background() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for process in started:
            process.terminate()
            process.wait(timeout=30)


def test_the_tutorial_has_steps_of_every_kind() -> None:
    kinds = [step.kind for step in steps()]
    assert {"run", "append", "merge", "replace"} <= set(kinds)
    assert all(step.expected for step in steps() if step.kind == "run" and "&" not in step.text)
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert not matches(["a ... 200"], ["a b 403"])


def test_the_tutorial_runs_as_written(
    tmp_path: Path, background: list[subprocess.Popen[bytes]]
) -> None:
    port = str(free_port())
    tools = [str(Path(sys.executable).parent), str(Path(find_opa_binary()).resolve().parent)]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")},
        "PATH": os.pathsep.join([*tools, os.environ.get("PATH", "")]),
        "PYTHONPATH": str(ROOT),
    }
    for step in steps():
        for config in tmp_path.glob("*/gateway.toml"):
            text = config.read_text(encoding="utf-8")
            config.write_text(text.replace("port = 8080", f"port = {port}"), encoding="utf-8")
        if step.kind != "run":
            apply_edit(tmp_path, step)
            continue
        command = step.text.replace("8080", port)
        if command.endswith(" &"):
            with (tmp_path / "background.log").open("ab") as log:
                background.append(
                    subprocess.Popen(
                        ["bash", "-c", command.removesuffix(" &")],
                        cwd=tmp_path,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
            continue
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        printed = done.stdout.splitlines()
        assert matches(step.expected, printed), (command, done.stdout, done.stderr)
        for line in printed:
            if line.strip().startswith("export "):
                name, _, value = line.strip().removeprefix("export ").partition("=")
                env[name] = shlex.split(value)[0]
