"""Every Python snippet of the README and of policies/README.md runs as written.

A document's snippets are one program read top to bottom, as a reader types them into one
file: each block may use the names an earlier block of the same document defined. The
program runs as a plain script (no top-level ``await``) in a fresh interpreter, in a folder
that shows the repository's files as its root does, and must exit 0 with nothing on stderr
and print what the comments after its ``print`` calls say. A block that shows a fragment
on purpose says so in its first line (``# fragment``) and is compiled, not run. JSON, TOML
and Rego blocks of the documents must parse.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from gateway import _json as strict_json
from gateway.testing import find_opa_binary

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md",)
REPOSITORY_FILES = ("bundles", "policies", "examples")
_BLOCK = re.compile(r"^(?P<indent>[ ]*)```python\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)

pytestmark = pytest.mark.integration


def snippets(document: str) -> list[tuple[int, str]]:
    """The Python blocks of ``document``: (line number, dedented code)."""
    text = (ROOT / document).read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        indent = len(match.group("indent"))
        body = "".join(line[indent:] for line in match.group("body").splitlines(True))
        found.append((text.count("\n", 0, match.start()) + 2, body))
    return found


def program(document: str) -> str:
    parts = []
    for line, code in snippets(document):
        if code.startswith("# fragment"):
            compile(code, f"{document}:{line}", "exec")
            continue
        # Each block is compiled alone first, so a block that is not valid on its own
        # (an await at module level, a syntax error) fails naming its own line.
        compile(code, f"{document}:{line}", "exec")
        parts.append(f"# --- {document}:{line}\n{code}")
    return "\n".join(parts)


def test_every_document_with_python_snippets_is_checked() -> None:
    with_snippets = {
        path.relative_to(ROOT).as_posix()
        for path in [*ROOT.glob("*.md"), *ROOT.glob("policies/*.md"), *ROOT.glob("docs/*.md")]
        if snippets(path.relative_to(ROOT).as_posix())
    }
    # docs/tutorial.md's Python is a file edit that tests/test_tutorial.py applies and runs.
    assert with_snippets - {"docs/tutorial.md"} <= set(DOCUMENTS)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_python_snippets_of_a_document_run_as_written(document: str) -> None:
    code = program(document)
    if not code:
        pytest.fail(f"{document} has no Python snippet to run")
    with tempfile.TemporaryDirectory() as scratch:
        # The snippets name the repository's files as seen from its root; what they write
        # (an audit trail) goes to a scratch folder that shows those files.
        for name in REPOSITORY_FILES:
            (Path(scratch) / name).symlink_to(ROOT / name)
        script = Path(scratch) / "snippets.py"
        script.write_text(code, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        result = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=scratch,
            env=env,
        )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr[-3000:]
    assert result.stdout.splitlines() == promised_output(document)


def promised_output(document: str) -> list[str]:
    """What the snippets say they print: the comment after each ``print(...)`` line."""
    promised = []
    for _, code in snippets(document):
        if code.startswith("# fragment"):
            continue
        for line in code.splitlines():
            stripped = line.strip()
            if stripped.startswith("print(") and "  # " in stripped:
                promised.append(stripped.split("  # ", 1)[1])
    return promised


def test_the_readme_snippets_promise_output_for_the_check_to_compare() -> None:
    assert len(promised_output("README.md")) >= 5


# -- the other languages of the documents ---------------------------------------------------

LANGUAGE_DOCUMENTS = (
    "README.md",
    "policies/README.md",
    "REPLAY.md",
    "docs/configuration.md",
    "docs/tutorial.md",
)


def blocks(document: str, language: str) -> list[tuple[int, str]]:
    text = (ROOT / document).read_text(encoding="utf-8")
    pattern = re.compile(
        rf"^(?P<indent>[ ]*)```{language}\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
    )
    found = []
    for match in pattern.finditer(text):
        indent = len(match.group("indent"))
        body = "".join(line[indent:] for line in match.group("body").splitlines(True))
        found.append((text.count("\n", 0, match.start()) + 2, body))
    return found


@pytest.mark.parametrize("document", LANGUAGE_DOCUMENTS)
def test_every_json_block_of_a_document_is_strict_json(document: str) -> None:
    # A block that shows members of an object ("name": value, ...) is read inside braces.
    for line, body in blocks(document, "json"):
        try:
            strict_json.parse(body.encode())
        except strict_json.StrictJSONError as exc:
            if not body.lstrip().startswith('"'):
                pytest.fail(f"{document}:{line}: {exc}")
            try:
                strict_json.parse(b"{" + body.encode() + b"}")
            except strict_json.StrictJSONError as exc:
                pytest.fail(f"{document}:{line}: {exc}")


@pytest.mark.parametrize("document", LANGUAGE_DOCUMENTS)
def test_every_toml_block_of_a_document_parses(document: str) -> None:
    for line, body in blocks(document, "toml"):
        try:
            tomllib.loads(body)
        except tomllib.TOMLDecodeError as exc:
            pytest.fail(f"{document}:{line}: {exc}")


@pytest.mark.parametrize("document", LANGUAGE_DOCUMENTS)
def test_every_rego_block_of_a_document_parses_with_opa(document: str) -> None:
    opa = find_opa_binary()
    for line, body in blocks(document, "rego"):
        with tempfile.TemporaryDirectory() as scratch:
            module = Path(scratch) / "snippet.rego"
            module.write_text(body, encoding="utf-8")
            result = subprocess.run(
                [opa, "parse", str(module)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        assert result.returncode == 0, f"{document}:{line}: {result.stderr[-2000:]}"
