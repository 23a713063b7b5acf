"""ECMA-262 patterns are matched by RE2, in time linear in the text, with ECMA's meaning.

The translation is held to the ECMA engine (``regress``) on generated patterns and texts:
whenever both accept a pattern, they agree on every text. Patterns without a linear-time
meaning are refused when a schema is compiled, never at a call.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections.abc import Iterator
from typing import Final

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway import bind
from gateway._ecma_re2 import UntranslatableError, compile_linear, translate
from gateway._schema import SchemaError, compile_schema
from gateway.testing import RecordingTool

ATOMS = [
    "a", "b", "z", "0", "9", "_", "-", " ", ".", "\\d", "\\D", "\\w", "\\W", "\\s", "\\S",
    "\\b", "\\B", "\\.", "\\/", "\\t", "\\n", "\\u00e9", "\\u{1F600}", "\\x41", "\\cJ", "\\0",
    "\\p{L}", "\\p{Lu}", "\\P{L}", "\\p{Letter}", "\\p{Nd}", "\\p{digit}", "\\p{ASCII}",
    "\\p{Script=Greek}", "\\p{White_Space}", "[a-c]", "[^a-c]", "[\\d_]", "[\\s]", "[\\b]",
    "[a\\-z]", "[\\u00e0-\\u00ff]", "[\\p{L}0-9]", "é", "😀", "^", "$",
]  # fmt: skip
QUANTIFIERS = ["", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,}", "*?", "+?"]
TEXT_CHARS = "ab zAZ09_-.\t\n\r\u2028\u00a0\ufeff\u0085é😀αΩ٣\x00\x0b"


def _pattern(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if depth < 2 and draw(st.integers(0, 5)) == 0:
            inner = _pattern(draw, depth + 1)
            group = draw(st.sampled_from(["({})", "(?:{})", "(?<g{}>{})"]))
            atom = group.format(inner) if "<g" not in group else f"(?<g{depth}>{inner})"
        else:
            atom = draw(st.sampled_from(ATOMS))
        parts.append(atom + draw(st.sampled_from(QUANTIFIERS)))
        if draw(st.integers(0, 6)) == 0:
            parts.append("|")
    return "".join(parts)


patterns = st.composite(_pattern)()
texts = st.text(alphabet=TEXT_CHARS, max_size=12)


# The reference engine backtracks, and on some nested quantifiers of groups that can match
# nothing (``((a?|){1,3})*?b``) its stack grows until an allocation of gigabytes aborts the
# process. It answers in a child process with bounded memory and time; an example it cannot
# answer there is rejected (hypothesis fails the test if that happens to many).
_ORACLE: Final = """
import json, resource, sys
import regress
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
for line in sys.stdin:
    pattern, texts = json.loads(line)
    try:
        ecma = regress.Regex(pattern, "u")
    except regress.RegressError:
        answer = None
    else:
        answer = [ecma.find(text) is not None for text in texts]
    print(json.dumps(answer), flush=True)
"""
_ORACLE_SECONDS: Final = 10.0


class EcmaOracle:
    """Whether the ECMA engine finds a pattern in each text, or None when it refuses it."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self._child is None or self._child.poll() is not None:
            self._child = subprocess.Popen(
                [sys.executable, "-c", _ORACLE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        return self._child

    def finds(self, pattern: str, texts: list[str]) -> list[bool] | Unanswered | None:
        child = self._start()
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            child.stdin.write(json.dumps([pattern, texts]) + "\n")
            child.stdin.flush()
        except BrokenPipeError:
            return self._lost()
        ready, _, _ = select.select([child.stdout], [], [], _ORACLE_SECONDS)
        line = child.stdout.readline() if ready else ""
        if not line:
            return self._lost()
        answer: list[bool] | None = json.loads(line)
        return answer

    def _lost(self) -> Unanswered:
        self.close()
        return UNANSWERED

    def close(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.communicate()  # reaps it and closes its pipes
            self._child = None


class Unanswered:
    """The ECMA engine ran out of its memory or time on an example."""


UNANSWERED: Final = Unanswered()


@pytest.fixture(scope="module")
def oracle() -> Iterator[EcmaOracle]:
    ecma = EcmaOracle()
    try:
        yield ecma
    finally:
        ecma.close()


@pytest.mark.integration
def test_the_oracle_survives_a_pattern_that_exhausts_the_ecma_engine(oracle: EcmaOracle) -> None:
    # Found by the property below: the reference engine's stack grows to gigabytes here.
    heavy = "(?<g0>(?<g1>\\x41?[^a-c]?\U0001f600?|[a\\-z]?|){1,3})*?\\x41"
    texts = ["\x00A-b0z\x0b A\u00e9-z"] * 4
    assert oracle.finds(heavy, texts) is UNANSWERED
    assert oracle.finds("a+b", ["xaab", "ba"]) == [True, False]  # a fresh child answers


@pytest.mark.integration
@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(patterns, st.lists(texts, min_size=1, max_size=8))
def test_the_translation_matches_what_the_ecma_engine_matches(
    oracle: EcmaOracle, pattern: str, samples: list[str]
) -> None:
    expected = oracle.finds(pattern, samples)
    if expected is None:
        return  # not ECMA-262: refused by the metaschema, never translated
    assume(expected is not UNANSWERED)
    assert isinstance(expected, list)
    try:
        linear = compile_linear(pattern)
    except UntranslatableError:
        return
    for text, found in zip(samples, expected, strict=True):
        assert (linear.search(text) is not None) == found, (pattern, translate(pattern), text)


@pytest.mark.parametrize(
    "pattern",
    ["(?=a)b", "(?!a)b", "(?<=a)b", "(?<!a)b", "(a)\\1", "(?<n>a)\\k<n>", "a{1001}",
     "\\p{Alphabetic}", "[\\S]"],
)  # fmt: skip
def test_a_pattern_without_a_linear_time_meaning_is_refused_when_the_schema_is_compiled(
    pattern: str,
) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    with pytest.raises(SchemaError, match="cannot be matched in linear time"):
        compile_schema(json.dumps(schema).encode())
    properties = {"type": "object", "patternProperties": {pattern: {}}}
    with pytest.raises(SchemaError, match="cannot be matched in linear time"):
        compile_schema(json.dumps(properties).encode())


@pytest.mark.parametrize("pattern", ["a{\u00b2}", "a{1,\u0663}", "a{\uff11}", "a{1\u00b9,2}"])
def test_a_repeat_count_in_other_digits_than_ascii_is_a_schema_error_not_a_crash(
    pattern: str,
) -> None:
    # ECMA-262's DecimalDigit is 0-9: "{²}" is no quantifier (str.isdigit says it is).
    with pytest.raises(UntranslatableError):
        translate(pattern)
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    with pytest.raises(SchemaError):
        compile_schema(json.dumps(schema).encode())


def test_ecma_meanings_that_differ_from_re2s_are_kept() -> None:
    cases = [
        (r"^.$", "\u2028", False),  # . is no line terminator in ECMA
        (r"^.$", "\u0085", True),
        (r"^\s$", "\ufeff", True),  # \s is ECMA's white space, not ASCII's
        (r"^\s$", "\u0085", False),
        (r"^\S$", "\u00a0", False),
        (r"^\d$", "٣", False),  # \d is ASCII
        (r"^\w$", "é", False),
        (r"a$", "a\n", False),  # $ is the end of the text only
        (r"^\p{digit}$", "٣", True),
        ("^\\0\u0663$", "\x00\u0663", True),  # \0 then a non-ECMA digit: NUL, then that
    ]
    for pattern, text, matches in cases:
        assert (compile_linear(pattern).search(text) is not None) is matches, (pattern, text)


@pytest.mark.integration
def test_a_long_argument_against_a_backtracking_pattern_is_admitted_in_bounded_time() -> None:
    # With a backtracking engine this admission takes hours (quadratic in 1 MiB); the
    # child process is given two minutes, a bound on a hang, not a measurement.
    code = """
import json
from gateway import ToolCall, bind
from gateway.testing import RecordingTool
schema = {"type": "object", "properties": {"email": {"type": "string",
          "pattern": "[a-z]+@[a-z]+"}}, "required": ["email"]}
contract = bind(RecordingTool("mail", schema))
try:
    contract.prepare(ToolCall("c", "mail", json.dumps({"email": "a" * 1_000_000})))
except Exception as exc:
    print(type(exc).__name__)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "InvalidInvocationError"), done.stderr


def test_the_refusal_names_the_pattern_but_a_call_never_quotes_the_text() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^[0-9]+$"}}}
    binding = bind(RecordingTool("t", schema))
    from gateway import InvalidInvocationError, ToolCall

    with pytest.raises(InvalidInvocationError) as refused:
        binding.prepare(ToolCall("c", "t", '{"s": "secret-value-1234"}'))
    assert "secret-value" not in str(refused.value)
