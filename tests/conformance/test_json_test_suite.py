"""The JSONTestSuite parsing corpus through the strict reader (RFC 8259 and RFC 7493).

``y_`` files must be accepted and ``n_`` files refused, except the ``y_`` files RFC 7493
(I-JSON) forbids; every ``i_`` file has the answer stated here. Nothing ever crashes.
"""

from __future__ import annotations

import pytest

from tests.conformance._suites import parsing_files, run_parsing

#: y_ files that RFC 7493 refuses: duplicate member names and noncharacters.
I_JSON_REFUSES = {
    "y_object_duplicated_key.json": "duplicate member names",
    "y_object_duplicated_key_and_value.json": "duplicate member names",
    "y_string_escaped_noncharacter.json": "a noncharacter (escaped)",
    "y_string_last_surrogates_1_and_2.json": "a noncharacter (U+10FFFF, a surrogate pair)",
    "y_string_nonCharacterInUTF-8_U+10FFFF.json": "a noncharacter",
    "y_string_nonCharacterInUTF-8_U+FFFF.json": "a noncharacter",
    "y_string_unicode_U+10FFFE_nonchar.json": "a noncharacter",
    "y_string_unicode_U+1FFFE_nonchar.json": "a noncharacter",
    "y_string_unicode_U+FDD0_nonchar.json": "a noncharacter",
    "y_string_unicode_U+FFFE_nonchar.json": "a noncharacter",
}

#: The gateway's answer to each implementation-defined file. Numbers are kept exact
#: (any size within the digit and exponent limits); text must be UTF-8 without lone
#: surrogates or a byte order mark; nesting is bounded (64 levels by default).
IMPLEMENTATION_DEFINED = {
    "i_number_double_huge_neg_exp.json": "accepted",
    "i_number_huge_exp.json": "refused",  # exponent beyond the exact decimal range
    "i_number_neg_int_huge_exp.json": "accepted",
    "i_number_pos_double_huge_exp.json": "accepted",
    "i_number_real_neg_overflow.json": "accepted",
    "i_number_real_pos_overflow.json": "accepted",
    "i_number_real_underflow.json": "accepted",
    "i_number_too_big_neg_int.json": "accepted",
    "i_number_too_big_pos_int.json": "accepted",
    "i_number_very_big_negative_int.json": "accepted",
    "i_structure_500_nested_arrays.json": "refused",  # deeper than 64 levels
    "i_structure_UTF-8_BOM_empty_object.json": "refused",
}

FILES = list(parsing_files())


def expected(name: str) -> str:
    if name.startswith("n_") or name in I_JSON_REFUSES:
        return "refused"
    if name.startswith("y_"):
        return "accepted"
    # Every other i_ file is about text: invalid UTF-8, UTF-16, lone surrogates.
    return IMPLEMENTATION_DEFINED.get(name, "refused")


def test_the_whole_parsing_corpus_is_vendored() -> None:
    assert len(FILES) == 318
    assert all(name in dict(FILES) for name in I_JSON_REFUSES)
    assert all(name in dict(FILES) for name in IMPLEMENTATION_DEFINED)


@pytest.mark.parametrize(("name", "raw"), FILES, ids=[name for name, _ in FILES])
def test_the_strict_reader_answers_each_file_as_the_specifications_say(
    name: str, raw: bytes
) -> None:
    assert run_parsing(raw) == expected(name)
