"""Loaders and runners for the vendored public conformance suites.

The JSON Schema Test Suite runs through the two steps ``Contract.prepare`` takes for a
call's arguments: the schema is compiled as ``bind`` compiles it and each instance is
decoded by the strict reader and validated, both from bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from gateway import _json, _schema

HERE = Path(__file__).parent
SCHEMA_SUITE = HERE / "json_schema_test_suite" / "tests" / "draft2020-12"
PARSING_SUITE = HERE / "json_test_suite" / "test_parsing"

Outcome = Literal["valid", "invalid", "bind refused", "crash"]


@dataclass(frozen=True, slots=True)
class SchemaTest:
    """One instance of one case of one suite file."""

    file: str
    case: str
    test: str
    schema: Any
    data: Any
    valid: bool

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.file, self.case, self.test)


def schema_tests() -> Iterator[SchemaTest]:
    """Every test of the draft 2020-12 suite, in file order."""
    for path in sorted(SCHEMA_SUITE.rglob("*.json")):
        name = path.relative_to(SCHEMA_SUITE).as_posix()
        # Numbers stay exact: the suite's literals reach the gateway as written.
        cases = json.loads(path.read_text(encoding="utf-8"), parse_float=Decimal)
        for case in cases:
            for test in case["tests"]:
                yield SchemaTest(
                    name,
                    case["description"],
                    test["description"],
                    case["schema"],
                    test["data"],
                    test["valid"],
                )


def run_schema_test(test: SchemaTest) -> Outcome:
    """Admit the test's instance under its schema as the gateway does."""
    try:
        compiled = _schema.compile_schema(_json.canonical(test.schema))
    except _schema.SchemaError:
        return "bind refused"
    try:
        value = _json.parse(_json.canonical(test.data))
        compiled.validate(value)
    except _json.StrictJSONError:
        return "invalid"
    except ValueError:
        return "invalid"
    except Exception:
        return "crash"
    return "valid"


def parsing_files() -> Iterator[tuple[str, bytes]]:
    """Every JSONTestSuite parsing file: its name and its bytes."""
    for path in sorted(PARSING_SUITE.glob("*.json")):
        yield path.name, path.read_bytes()


def run_parsing(raw: bytes) -> Literal["accepted", "refused", "crash"]:
    """Decode ``raw`` with the strict reader used for arguments and schemas."""
    try:
        _json.parse(raw)
    except _json.StrictJSONError:
        return "refused"
    except Exception:
        return "crash"
    return "accepted"


def schema_report() -> dict[str, tuple[int, int]]:
    """Per file: (tests that agree with the suite, tests)."""
    counts: dict[str, list[int]] = {}
    for test in schema_tests():
        entry = counts.setdefault(test.file, [0, 0])
        entry[1] += 1
        outcome = run_schema_test(test)
        if outcome == ("valid" if test.valid else "invalid"):
            entry[0] += 1
    return {name: (ok, total) for name, (ok, total) in counts.items()}


if __name__ == "__main__":
    report = schema_report()
    for name, (ok, total) in report.items():
        print(f"{name}\t{ok}/{total}")
    print("total", sum(ok for ok, _ in report.values()), sum(t for _, t in report.values()))
    parsed: dict[str, list[int]] = {}
    for name, raw in parsing_files():
        outcome = run_parsing(raw)
        want = {"y": "accepted", "n": "refused"}.get(name[0])
        entry = parsed.setdefault(name[0], [0, 0, 0])
        entry[1] += 1
        if outcome == want:
            entry[0] += 1
        if outcome == "crash":
            entry[2] += 1
    for prefix, (ok, total, crashes) in parsed.items():
        print(f"parsing {prefix}_: {ok}/{total} agree, {crashes} crashes")
