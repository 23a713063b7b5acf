"""Masking: key names and JSON pointers become keyed digests; raw values are scrubbed."""

from __future__ import annotations

import copy
import hashlib
import hmac
import re
from decimal import Decimal
from typing import Any

import pytest

from gateway.audit import DEFAULT_MASKED_KEYS, Masker

KEY = b"mask key"


def masked(value: Any, key: bytes = KEY) -> str:
    """The expected replacement for a string value."""
    return "masked:" + hmac.new(key, str(value).encode(), hashlib.sha256).hexdigest()[:24]


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "Password",
        "api_key",
        "apiKey",
        "API-KEY",
        "Authorization",
        "access_token",
        "client-secret",
        "privateKey",
        "card_number",
    ],
)
def test_default_key_names_are_masked_whatever_their_case_and_separators(name: str) -> None:
    masker = Masker(key=KEY)

    actual = masker.mask({name: "s3cr3t-value", "query": "kept"})

    assert actual == {name: masked("s3cr3t-value"), "query": "kept"}


def test_the_default_key_names_cover_the_common_credentials() -> None:
    expected = {"password", "token", "apikey", "authorization", "secret", "privatekey"}

    assert expected <= DEFAULT_MASKED_KEYS


def test_masked_keys_are_found_at_any_depth_and_inside_lists() -> None:
    document = {
        "user": {"name": "alice", "password": "pw-one"},
        "headers": [{"Authorization": "Bearer abc.def"}, {"Accept": "text/plain"}],
        "deep": [[{"nested": {"api_key": "key-two"}}]],
    }

    actual = Masker(key=KEY).mask(document)

    assert actual == {
        "user": {"name": "alice", "password": masked("pw-one")},
        "headers": [{"Authorization": masked("Bearer abc.def")}, {"Accept": "text/plain"}],
        "deep": [[{"nested": {"api_key": masked("key-two")}}]],
    }


def test_a_masked_key_hides_its_whole_value_even_when_it_is_an_object() -> None:
    masker = Masker(key=KEY)
    found: list[str] = []

    actual = masker.mask({"token": {"value": "tok-1", "scopes": ["read"], "n": 7}}, found)

    assert actual == {"token": masker.digest({"value": "tok-1", "scopes": ["read"], "n": 7})}
    assert sorted(found) == ["7", "read", "tok-1"]


def test_without_patterns_only_the_configured_key_names_are_masked() -> None:
    masker = Masker(keys=["pin"], patterns=(), values=(), key=KEY)

    actual = masker.mask({"pin": "1234", "password": "visible"})

    assert actual == {"pin": masked("1234"), "password": "visible"}


def test_configured_key_names_add_to_the_default_patterns() -> None:
    masker = Masker(keys=["iban"], key=KEY)

    actual = masker.mask({"iban": "DE89-3704", "password": "pw-1", "query": "kept"})

    assert actual == {"iban": masked("DE89-3704"), "password": masked("pw-1"), "query": "kept"}


@pytest.mark.parametrize(
    ("pointer", "document", "expected"),
    [
        pytest.param(
            "/card/number",
            {"card": {"number": "4111-1111", "holder": "alice"}},
            {"card": {"number": masked("4111-1111"), "holder": "alice"}},
            id="member",
        ),
        pytest.param(
            "/items/1",
            {"items": ["public", "hidden-1"]},
            {"items": ["public", masked("hidden-1")]},
            id="array-index",
        ),
        pytest.param(
            "/a~1b/c~0d",
            {"a/b": {"c~d": "escaped-1"}},
            {"a/b": {"c~d": masked("escaped-1")}},
            id="escaped",
        ),
        pytest.param(
            "/card/number",
            {"card": "no-number-here"},
            {"card": "no-number-here"},
            id="absent",
        ),
        pytest.param(
            "/session",
            {"session": {"id": "sess-1"}},
            {"session": Masker(key=KEY).digest({"id": "sess-1"})},
            id="whole-object",
        ),
    ],
)
def test_json_pointers_mask_exactly_the_values_they_point_at(
    pointer: str, document: dict[str, Any], expected: dict[str, Any]
) -> None:
    masker = Masker(keys=(), patterns=(), values=(), pointers=[pointer], key=KEY)

    assert masker.mask(document) == expected


def test_a_pointer_that_does_not_start_with_a_slash_is_refused() -> None:
    with pytest.raises(ValueError, match="JSON pointer"):
        Masker(pointers=["card/number"])


def test_masking_returns_a_copy_and_leaves_the_document_alone() -> None:
    document = {"password": "pw", "list": [{"token": "t"}]}
    before = copy.deepcopy(document)

    Masker().mask(document)

    assert document == before


def test_mask_reports_every_raw_value_it_replaced() -> None:
    found: list[str] = []

    Masker(pointers=["/pin"], key=KEY).mask(
        {"password": "pw-1", "pin": 1234, "list": [{"token": "tok-2"}], "flag": True}, found
    )

    assert sorted(found) == ["1234", "pw-1", "tok-2"]


def test_equal_secrets_give_equal_digests_under_one_key() -> None:
    masker = Masker(key=KEY)

    assert masker.digest("hunter2") == masker.digest("hunter2")
    assert masker.digest("hunter2") != masker.digest("hunter3")


def test_the_same_secret_gives_different_digests_under_different_keys() -> None:
    assert Masker(key=b"one").digest("hunter2") != Masker(key=b"two").digest("hunter2")


def test_without_a_key_each_masker_draws_its_own() -> None:
    assert Masker().digest("hunter2") != Masker().digest("hunter2")


def test_a_digest_is_masked_followed_by_24_hex_digits() -> None:
    assert re.fullmatch(r"masked:[0-9a-f]{24}", Masker().digest("x")) is not None


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param({"user": "u", "pass": "p"}, {"pass": "p", "user": "u"}, id="member-order"),
        pytest.param([1, Decimal("2.5")], [1, Decimal("2.5")], id="array"),
    ],
)
def test_equal_structured_secrets_give_equal_digests(first: Any, second: Any) -> None:
    masker = Masker(key=KEY)

    assert masker.digest(first) == masker.digest(second)


def test_scrub_replaces_raw_values_in_the_free_text_of_a_record_only() -> None:
    record = {
        "message": "password hunter2-x rejected",
        "reasons": ["saw hunter2-x twice: hunter2-x"],
        "detail": "EngineError: hunter2-x",
        "hunter2-x": "as a key",
        "tool": "hunter2-x",
        "count": 3,
    }

    actual = Masker(key=KEY).scrub(record, ["hunter2-x"])

    assert actual == {
        "message": "password [masked] rejected",
        "reasons": ["saw [masked] twice: [masked]"],
        "detail": "EngineError: [masked]",
        "hunter2-x": "as a key",
        "tool": "hunter2-x",
        "count": 3,
    }


def test_scrub_returns_a_copy_and_leaves_the_record_alone() -> None:
    record = {"message": "saw hunter2-x", "reasons": ["hunter2-x"], "tool": "t"}
    before = copy.deepcopy(record)

    Masker(key=KEY).scrub(record, ["hunter2-x"])

    assert record == before


def test_scrub_replaces_the_longest_secret_first() -> None:
    actual = Masker(key=KEY).scrub({"message": "abcdefgh"}, ["abcd", "abcdefgh"])

    assert actual == {"message": "[masked]"}


@pytest.mark.parametrize(
    ("text", "secrets", "expected"),
    [
        pytest.param("xabcdefy", ["abcd", "cdef"], "x[masked]y", id="overlapping"),
        pytest.param("xabcdcdefy", ["abcd", "cdef"], "x[masked]y", id="touching"),
        pytest.param("abcd abcd", ["abcd"], "[masked] [masked]", id="apart"),
        pytest.param("aaaaaaa", ["aaaa"], "[masked]", id="self-overlapping"),
        pytest.param("the pw is d]xyz!", ["d]xyz"], "the pw is [masked]!", id="marker-like"),
    ],
)
def test_scrub_masks_every_character_of_every_occurrence_of_a_secret(
    text: str, secrets: list[str], expected: str
) -> None:
    # One secret after another would leave "ef" of "cdef" once "abcd" is gone.
    assert Masker(key=KEY).scrub({"message": text}, secrets) == {"message": expected}


def test_scrub_leaves_values_shorter_than_four_characters() -> None:
    record = {"message": "the pin is 123"}

    assert Masker(key=KEY).scrub(record, ["123"]) == record
