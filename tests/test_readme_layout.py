"""The README's "Project layout" describes the real tree: everything it names exists, and
every package, core module and top-level folder is named."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gateway"
# Folders of the working tree that are not the project's (git-ignored build and tool output).
NOT_THE_PROJECTS = {"build", "dist", "__pycache__"}
# Packages whose modules the layout lists one by one.
LISTED_MODULE_BY_MODULE = ("gateway", "gateway/policy", "gateway/audit", "gateway/service")


def _layout() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Project layout") :]
    block = re.search(r"```text\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the layout is one text block"
    return block.group(1).splitlines()


def _named() -> set[str]:
    # A line is "<paths>  <what they are>"; an indented line names modules of the last
    # package named at the start of a line; a line of only description continues the last.
    named: set[str] = set()
    package = ""
    for line in _layout():
        indented = line.startswith("  ") and not line.startswith("   ")
        paths = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        if line.startswith(" ") and not indented:
            continue
        for token in paths.split():
            if indented:
                named.add(f"{package}/{token}")
            else:
                named.add(token.rstrip("/"))
                if token.startswith("gateway"):
                    package = token.rstrip("/")
    return named


def test_everything_the_layout_names_exists() -> None:
    missing = sorted(path for path in _named() if not (ROOT / path).exists())
    assert missing == []


def test_the_layout_names_every_package_of_the_gateway() -> None:
    packages = {path.parent.relative_to(ROOT).as_posix() for path in PACKAGE.rglob("__init__.py")}
    assert packages - _named() == set()


def test_the_layout_names_each_module_of_the_packages_it_lists_module_by_module() -> None:
    modules = {
        path.relative_to(ROOT).as_posix()
        for package in LISTED_MODULE_BY_MODULE
        for path in (ROOT / package).glob("*.py")
        if path.name not in {"__init__.py", "__main__.py"}
    }
    assert modules - _named() == set()


def test_the_layout_names_every_top_level_folder() -> None:
    folders = {
        path.name
        for path in ROOT.iterdir()
        if path.is_dir()
        and not path.name.startswith(".")
        and path.name not in NOT_THE_PROJECTS
        and not path.name.endswith(".egg-info")
    }
    assert folders - _named() == set()
