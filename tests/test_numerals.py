"""A count, a length or an index in caller text is ASCII 0-9, everywhere in the gateway.

``str.isdigit`` accepts superscripts (``"²"``, which ``int`` then rejects with an exception) and
every script's digits (``"٣"``, which ``int`` reads as 3). Either one let a caller crash a
request or address something other than what a JSON pointer, an HTTP header or an ECMA-262
quantifier means. These tests hold the two helpers to the grammars they stand for, hold every
reader of numerals in the package to the helpers, and drive the readers with such digits.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway._numerals import array_index, ascii_digits
from gateway.policy import PathView

PACKAGE: Final = Path(__file__).resolve().parent.parent / "gateway"

# Unicode digits that are not ASCII: some int() refuses, some it reads as a number.
# Superscripts, a circled one, Arabic-Indic, Persian, NKo, Devanagari, fullwidth, bold maths.
ODD_DIGITS: Final = (*"\u00b2\u00b3\u00b9\u2460\u0663\u06f5\u07c3\u0969\uff10", "\U0001d7d7")

numeral_texts = st.text(alphabet=st.sampled_from("0123456789" + "".join(ODD_DIGITS) + "a -+"))


@given(numeral_texts | st.text())
def test_ascii_digits_is_exactly_one_or_more_of_0_to_9(text: str) -> None:
    assert ascii_digits(text) is (re.fullmatch(r"[0-9]+", text, re.ASCII) is not None)


@given(numeral_texts | st.text())
def test_array_index_is_rfc_6901s_index_grammar(token: str) -> None:
    expected = int(token) if re.fullmatch(r"0|[1-9][0-9]*", token, re.ASCII) else None
    assert array_index(token) == expected


@pytest.mark.parametrize("digit", ODD_DIGITS)
def test_a_non_ascii_digit_is_no_numeral(digit: str) -> None:
    assert not ascii_digits(digit)
    assert array_index(digit) is None
    assert not ascii_digits("1" + digit)


def test_no_module_of_the_package_reads_numerals_with_the_unicode_predicates() -> None:
    # isdigit/isdecimal/isnumeric are true for the digits above: every numeral goes through
    # gateway._numerals instead (a new call site fails here, naming its file and line).
    offenders = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\.is(digit|decimal|numeric)\(", line)
    ]
    assert offenders == []


@pytest.mark.parametrize("token", [*ODD_DIGITS, "01", "00", "+1", "-0", " 1"])
def test_a_path_argument_under_an_odd_index_is_absent_not_another_element(token: str) -> None:
    view = PathView({"t": [f"/paths/{token}"]})
    arguments = {"paths": [f"/srv/{n}" for n in range(12)]}

    assert view.facts("t", arguments) == {}
    assert view.facts("t", {"paths": {token: "/srv/x"}}) != {}  # a member of that name is found


def test_a_path_argument_under_an_ascii_index_is_that_element() -> None:
    view = PathView({"t": ["/paths/3"]})

    facts = view.facts("t", {"paths": [f"/srv/{n}" for n in range(5)]})

    assert list(facts) == ["/paths/3"]
    assert facts["/paths/3"]["path"]["resolved"] == "/srv/3"
