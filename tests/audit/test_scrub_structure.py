"""Scrubbing keeps an audit record's structure: whatever a caller's secrets are, only the free
text of a record changes, no member name and no other field; no secret survives in the text."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any, Final

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway import Authorization, Decision, ToolCall, ToolDefinition
from gateway.audit import AuditTrail, Masker, MemorySink
from gateway.obligations import AuditFields, RequireApproval
from gateway.policy import EngineError, caller_context

KEY: Final = b"mask key"
WALL: Final = 1_000_000_000.0  # 2001-09-09T01:46:40.000000+00:00
LATENCY: Final = 0.001234  # latency_us 1234
#: The members of a record that scrubbing may change: its free text and its recorded
#: documents (gateway.audit._mask.SCRUBBED_FIELDS, written out here so that these tests also
#: run, and fail, against a masker without that name).
FREE_TEXT: Final = ("message", "reasons", "detail", "arguments", "fields")
SCRUBBED: Final = "[masked]"
CHAIN: Final = ("seq", "prev", "hash")
_DIGEST: Final = re.compile(r"masked:[0-9a-f]{24}(~[0-9]+)?")

#: What a record is made of: its member names, its words and its numbers as text.
RECORD_WORDS: Final = (
    *("type", "time", "decision_id", "call_id", "tool", "arguments_digest", "arguments"),
    *("context", "result", "code", "message", "reasons", "detail", "revision", "engine"),
    *("cached", "cached_from", "latency_us", "outcome", "obligations", "fields", "seq"),
    *("decision", "allow", "deny", "error", "denied", "no_decision", "engine_error"),
    *("executed", "failed", "rejected", "cancelled", "invalid", "tool_failed", "audit"),
    *("require_approval", "role", "admin", "subject", "alice", "roles", "reader", "tenant"),
    *("acme", "request_id", "search", "read_file", "opa", "rev-1234", "call-1234", "id-1"),
    *("masked", "masked:", SCRUBBED, "1234", "2001-09-09T01:46:40.000000+00:00", "0000"),
    *("true", "false", "null", "password", "customer", "query", "visible query"),
)


def _substrings(word: str) -> st.SearchStrategy[str]:
    return st.integers(0, len(word)).flatmap(
        lambda start: st.integers(start, len(word)).map(lambda end: word[start:end])
    )


SECRETS = st.lists(
    st.one_of(
        st.sampled_from(RECORD_WORDS),
        st.sampled_from(RECORD_WORDS).flatmap(_substrings),
        # Noncharacters aside: the strict JSON of admission refuses them.
        st.text(st.characters(exclude_categories=("Cs", "Cn")), min_size=1, max_size=12),
        st.sampled_from(["Bearer abcdefgh12345", "AKIAIOSFODNN7EXAMPLE", "d]1234", "ed]"]),
    ),
    min_size=1,
    max_size=6,
)
TOOLS = st.sampled_from(["search", "read_file", "masked", "arguments", "allow", "1234"])


def structure(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the strings of its free text left out (and the names inside them)."""
    return {name: _shape(value) if name in FREE_TEXT else value for name, value in record.items()}


def _shape(node: Any) -> Any:
    if isinstance(node, str):
        return "<text>"
    if isinstance(node, list):
        return [_shape(item) for item in node]
    if isinstance(node, dict):
        return [_shape(value) for value in node.values()]
    return node


def free_texts(record: dict[str, Any]) -> list[str]:
    """Every string of the record's free text, member names inside it included."""
    texts: list[str] = []
    stack = [record.get(name) for name in FREE_TEXT]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            texts.append(node)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            texts.extend(name for name in node if isinstance(name, str))
            stack.extend(node.values())
    return texts


def survivors(record: dict[str, Any], secrets: Iterable[str]) -> list[str]:
    """The secrets (four characters or more) still readable in the record's free text.

    A digest is opaque; elsewhere each ``[masked]`` stands for what it replaced, so a secret
    that only appears across one (``d]xy`` in ``[masked]xy``) or inside one is not read.
    """
    pieces = [
        piece
        for text in free_texts(record)
        if _DIGEST.fullmatch(text) is None
        for piece in text.split(SCRUBBED)
    ]
    return sorted({s for s in secrets if len(s) >= 4 and any(s in piece for piece in pieces)})


class UnscrubbedMasker(Masker):
    """A masker that leaves records as they are built: the record before its scrub."""

    def scrub(self, record: Any, secrets_found: Any, *args: Any, **kwargs: Any) -> Any:
        return dict(record)


def trails() -> tuple[AuditTrail, AuditTrail]:
    """Two trails alike (key, clocks, ids), one of which never scrubs."""

    def trail(masker: Masker) -> AuditTrail:
        counter = itertools.count(1)
        return AuditTrail(
            MemorySink(),
            masker=masker,
            wall_clock=lambda: WALL,
            timer=lambda: 0.0,
            new_id=lambda: f"id-{next(counter)}",
        )

    return trail(Masker(key=KEY)), trail(UnscrubbedMasker(key=KEY))


def arguments_holding(secrets: list[str]) -> bytes:
    """An argument document in which every secret is a masked value."""
    members: dict[str, Any] = {f"password_{index}": s for index, s in enumerate(secrets)}
    return json.dumps({**members, "query": "visible query"}).encode()


def echo(secrets: list[str]) -> str:
    """Free text that quotes every secret, beside words of the record."""
    return " | ".join([*secrets, "allow", "search", "1234", "masked"])


def decision_records(
    secrets: list[str], tool: str, decision: Decision | None, error: Exception | None
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """One decision record as written and as built before its scrub, and its masked values."""
    records = []
    found: list[str] = []
    for trail in trails():
        found = []
        authorization = Authorization(
            ToolDefinition(tool, {"type": "object"}), arguments_holding(secrets)
        )
        with caller_context({"subject": "alice", "roles": ["reader"], "tenant": "acme"}):
            _, record = trail.decision_record(
                authorization,
                call_id="call-1234",
                decision=decision,
                error=error,
                latency=LATENCY,
                secrets=found,
                request_id="r-1234",
            )
        records.append(record)
    return records[0], records[1], found


def assert_structure_kept(scrubbed: dict[str, Any], unscrubbed: dict[str, Any]) -> None:
    assert list(scrubbed) == list(unscrubbed)
    assert structure(scrubbed) == structure(unscrubbed)
    assert json.dumps(structure(scrubbed)) == json.dumps(structure(unscrubbed))


# -- decision records ---------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(secrets=SECRETS, tool=TOOLS, allowed=st.booleans(), others=st.lists(SECRETS.map(echo)))
@example(secrets=["arguments"], tool="search", allowed=False, others=[])
@example(secrets=["allow"], tool="search", allowed=True, others=[])
@example(secrets=["search"], tool="search", allowed=True, others=[])
@example(secrets=["masked"], tool="search", allowed=False, others=[])
@example(secrets=["1234"], tool="search", allowed=False, others=[])
def test_property_a_decision_record_keeps_its_structure_whatever_the_secrets(
    secrets: list[str], tool: str, allowed: bool, others: list[str]
) -> None:
    # Reasons quoting the secrets, and texts quoting other ones, which are not masked values.
    decision = Decision(
        allowed,
        message=echo(secrets),
        reasons=(*secrets, *others, "rule 1234"),
        revision="rev-1234",
        engine="opa",
        obligations=(
            RequireApproval(role="admin"),
            AuditFields(json.dumps({"customer": "acme", "password": secrets[0]}).encode()),
        ),
    )

    scrubbed, unscrubbed, found = decision_records(secrets, tool, decision, None)

    assert_structure_kept(scrubbed, unscrubbed)
    assert survivors(scrubbed, found) == []
    assert set(secrets) <= set(found)


@settings(max_examples=100, deadline=None)
@given(secrets=SECRETS, tool=TOOLS)
def test_property_an_error_decision_record_keeps_its_structure_whatever_the_secrets(
    secrets: list[str], tool: str
) -> None:
    error = EngineError(echo(secrets), detail=echo(secrets))

    scrubbed, unscrubbed, found = decision_records(secrets, tool, None, error)

    assert_structure_kept(scrubbed, unscrubbed)
    assert survivors(scrubbed, found) == []


# -- outcome records and refusals ---------------------------------------------------------------

OUTCOMES = st.sampled_from(
    [
        ("executed", None),
        ("failed", "tool_failed"),
        ("rejected", "denied"),
        ("rejected", "tool_rejected"),
        ("cancelled", "cancelled"),
    ]
)


@settings(max_examples=200, deadline=None)
@given(secrets=SECRETS, tool=TOOLS, outcome=OUTCOMES, quoted=st.booleans())
@example(secrets=["outcome"], tool="search", outcome=("failed", "tool_failed"), quoted=True)
@example(secrets=["failed"], tool="search", outcome=("failed", "tool_failed"), quoted=True)
@example(secrets=["id-1"], tool="search", outcome=("executed", None), quoted=False)
def test_property_an_outcome_record_keeps_its_structure_whatever_the_secrets(
    secrets: list[str], tool: str, outcome: tuple[str, str | None], quoted: bool
) -> None:
    definition = ToolDefinition(tool, {"type": "object"})
    message = echo(secrets) if quoted else None
    scrubbed, unscrubbed = (
        trail.outcome_record(
            definition,
            call_id="call-1234",
            decision_id="id-1",
            outcome=outcome[0],
            code=outcome[1],
            latency=LATENCY,
            message=message,
            secrets=secrets,
        )
        for trail in trails()
    )

    assert_structure_kept(scrubbed, unscrubbed)
    assert survivors(scrubbed, secrets) == []


def refused(trail: AuditTrail, call: ToolCall, message: str) -> dict[str, Any]:
    """The refusal record of ``call``, without the chain fields its sink added."""

    async def record() -> dict[str, Any]:
        with caller_context({"subject": "alice", "roles": ["reader"]}):
            return await trail.refusal(call, code="invalid_invocation", message=message)

    written = asyncio.run(record())
    return {name: value for name, value in written.items() if name not in CHAIN}


@settings(max_examples=50, deadline=None)
@given(secrets=SECRETS, tool=TOOLS)
@example(secrets=["invalid"], tool="search")
@example(secrets=["alice"], tool="search")
def test_property_a_refusal_keeps_its_structure_whatever_the_secrets(
    secrets: list[str], tool: str
) -> None:
    call = ToolCall("call-1234", tool, arguments_holding(secrets).decode())
    scrubbed, unscrubbed = (refused(trail, call, echo(secrets)) for trail in trails())

    assert_structure_kept(scrubbed, unscrubbed)
    assert survivors(scrubbed, secrets) == []


# -- the forgeries of the review, one by one ----------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "read"),
    [
        pytest.param("arguments", lambda r: r["arguments"]["query"], id="arguments-member"),
        pytest.param("context", lambda r: r["context"]["subject"], id="context-member"),
        pytest.param("allow", lambda r: r["result"], id="result-value"),
        pytest.param("search", lambda r: r["tool"], id="tool-name"),
        pytest.param("decision", lambda r: r["type"], id="record-type"),
        pytest.param("alice", lambda r: r["context"]["subject"], id="subject"),
        pytest.param("rev-1234", lambda r: r["revision"], id="revision"),
        pytest.param("opa-rest", lambda r: r["engine"], id="engine"),
        pytest.param("call-1234", lambda r: r["call_id"], id="call-id"),
        pytest.param("masked", lambda r: r["arguments"]["password_0"], id="digest"),
    ],
)
def test_a_secret_equal_to_a_part_of_the_record_leaves_that_part_alone(
    secret: str, read: Callable[[dict[str, Any]], Any]
) -> None:
    decision = Decision(True, message=f"ok {secret}", revision="rev-1234", engine="opa-rest")

    scrubbed, unscrubbed, _ = decision_records([secret], "search", decision, None)

    assert read(scrubbed) == read(unscrubbed)
    assert_structure_kept(scrubbed, unscrubbed)
    assert scrubbed["message"] == "ok [masked]"


@pytest.mark.parametrize(
    ("arguments", "echo_at"),
    [
        ({"api_key": "k-123456", "url": "https://x.test/?key=k-123456"}, ("url",)),
        ({"password": "ACME-7", "to_account": "ACME-7"}, ("to_account",)),
        ({"token": "tok-98765", "notes": ["see tok-98765"]}, ("notes", 0)),
        (
            {"secret": "s3cr3t-v", "nested": {"deep": {"copy": "xs3cr3t-vx"}}},
            ("nested", "deep", "copy"),
        ),
    ],
)
def test_an_argument_that_repeats_a_masked_value_is_recorded_as_its_digest(
    arguments: dict[str, Any], echo_at: tuple[Any, ...]
) -> None:
    # Found in review: with only free text scrubbed, a secret repeated in an argument that
    # neither its name nor its shape marks was recorded in clear.
    trail = trails()[0]
    authorization = Authorization(
        ToolDefinition("search", {"type": "object"}), json.dumps(arguments).encode()
    )
    found: list[str] = []
    with caller_context({"subject": "alice", "roles": ["reader"]}):
        _, record = trail.decision_record(
            authorization, call_id="c1", decision=Decision(True), error=None,
            latency=LATENCY, secrets=found, request_id=None,
        )  # fmt: skip
    secret = next(iter(arguments.values()))
    assert secret not in json.dumps(record)
    echoed: Any = record["arguments"]
    original: Any = arguments
    for step in echo_at:
        echoed, original = echoed[step], original[step]
    assert echoed == Masker(key=KEY).digest(original)
    assert list(record["arguments"]) == list(arguments)


def test_an_outcome_whose_secret_is_its_outcome_word_still_reads_as_that_outcome() -> None:
    definition = ToolDefinition("search", {"type": "object"})

    record = trails()[0].outcome_record(
        definition,
        call_id="call-1",
        decision_id="id-1",
        outcome="failed",
        code="tool_failed",
        latency=LATENCY,
        message="the tool failed",
        secrets=["failed", "outcome", "tool_failed", "1234"],
    )

    assert (record["outcome"], record["code"], record["latency_us"]) == (
        "failed",
        "tool_failed",
        1234,
    )
    assert record["message"] == "the tool [masked]"
    assert list(record) == [
        *("type", "time", "decision_id", "call_id", "tool"),
        *("outcome", "code", "message", "latency_us"),
    ]


# -- the scrub itself, on any record -------------------------------------------------------------

_NAMES = st.one_of(st.sampled_from(RECORD_WORDS), st.text(max_size=8))
_TEXT = st.one_of(st.sampled_from(RECORD_WORDS), st.text(max_size=20))
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_NAMES, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    record=st.dictionaries(_NAMES, _JSON, max_size=8),
    text=st.dictionaries(st.sampled_from(FREE_TEXT), _JSON),
    secrets=SECRETS,
)
@example(
    record={"tool": "search"},
    text={"message": {"hunter22-a": 1, "hunter22-b": 2}},
    secrets=["hunter22"],
)
@example(record={}, text={"reasons": [{"AKIAIOSFODNN7EXAMPLE": 1, "x": 2}]}, secrets=["none"])
def test_property_scrub_changes_only_free_text_and_never_loses_a_member(
    record: dict[str, Any], text: dict[str, Any], secrets: list[str]
) -> None:
    # Free text quoting the secrets, nested in lists and objects (a result document, say):
    # names inside it that hold a secret are replaced, each by a name of its own.
    whole = {**record, **text}
    for name in FREE_TEXT:
        if name in whole:
            whole[name] = [whole[name], echo(secrets), {echo(secrets): echo(secrets)}]

    scrubbed = Masker(key=KEY).scrub(whole, secrets)

    assert_structure_kept(scrubbed, whole)
    assert survivors(scrubbed, secrets) == []


def test_the_free_text_fields_written_out_here_are_the_maskers() -> None:
    from gateway.audit._mask import SCRUBBED_FIELDS

    assert SCRUBBED_FIELDS == FREE_TEXT
