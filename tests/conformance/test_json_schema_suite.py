"""The official JSON Schema Test Suite (draft 2020-12) through admission.

Every test of every vendored file (required, optional, optional/format) must agree with
the suite, except the divergences listed here, each with its reason. A listed divergence
that starts agreeing fails too, so the list never hides a change.
"""

from __future__ import annotations

import pytest

from tests.conformance._suites import SCHEMA_SUITE, SchemaTest, run_schema_test, schema_tests

EXTERNAL = (
    "the gateway never loads an external document (no network, no files): the schema "
    "needs a remote document or a remote metaschema, so bind refuses it"
)
ASSERTED = (
    "formats are asserted, never annotation only: a tool author who writes a format "
    "means it to be enforced"
)
UNKNOWN_FORMAT = "a format the gateway has no checker for cannot be asserted: bind refuses it"
NONCHARACTER = "RFC 7493 (I-JSON) forbids noncharacters in strings: the instance is not admitted"

#: Whole files that diverge, with their reason.
FILES = {
    "refRemote.json": EXTERNAL,
    "vocabulary.json": EXTERNAL,
    "optional/cross-draft.json": EXTERNAL,
    "optional/format-assertion.json": EXTERNAL,
    "optional/format/unknown.json": UNKNOWN_FORMAT,
}
#: Cases (file, case description) that diverge, with their reason.
CASES = {
    ("dynamicRef.json", "strict-tree schema, guards against misspelled properties"): EXTERNAL,
    ("dynamicRef.json", "tests for implementation dynamic anchor and reference link"): EXTERNAL,
    ("dynamicRef.json", "$ref and $dynamicAnchor are independent of order - $defs first"): (
        EXTERNAL
    ),
    ("dynamicRef.json", "$ref and $dynamicAnchor are independent of order - $ref first"): (
        EXTERNAL
    ),
    ("dynamicRef.json", "$ref to $dynamicRef finds detached $dynamicAnchor"): EXTERNAL,
}
#: Single tests (file, case, test) that diverge, with their reason.
TESTS = {
    (
        "optional/format/idn-email.json",
        "validation of an internationalized e-mail addresses",
        "a noncharacter in the local part is valid",
    ): NONCHARACTER,
}


def divergence(test: SchemaTest) -> str | None:
    """The listed reason this test diverges, or None where it must agree."""
    if test.file in FILES:
        return FILES[test.file]
    if (test.file, test.case) in CASES:
        return CASES[(test.file, test.case)]
    if test.file == "format.json" and test.test.endswith("only an annotation by default"):
        return ASSERTED
    return TESTS.get(test.key)


ALL_TESTS = list(schema_tests())
FILE_NAMES = sorted({test.file for test in ALL_TESTS})


def test_every_draft_2020_12_file_of_the_suite_is_vendored_and_run() -> None:
    on_disk = sorted(p.relative_to(SCHEMA_SUITE).as_posix() for p in SCHEMA_SUITE.rglob("*.json"))

    assert on_disk == FILE_NAMES
    assert len(ALL_TESTS) == 2225


@pytest.mark.parametrize("name", FILE_NAMES)
def test_admission_agrees_with_the_suite_file_except_the_listed_divergences(name: str) -> None:
    disagreements = []
    for test in (t for t in ALL_TESTS if t.file == name):
        outcome = run_schema_test(test)
        assert outcome != "crash", test.key
        agrees = outcome == ("valid" if test.valid else "invalid")
        listed = divergence(test) is not None
        if agrees == listed:
            disagreements.append((test.case, test.test, outcome, divergence(test)))

    assert disagreements == []


def test_external_divergences_are_refusals_at_bind_never_admissions() -> None:
    # Fail closed: a schema that needs a remote document is refused, never half-checked.
    for test in ALL_TESTS:
        if divergence(test) in (EXTERNAL, UNKNOWN_FORMAT):
            assert run_schema_test(test) == "bind refused", test.key
