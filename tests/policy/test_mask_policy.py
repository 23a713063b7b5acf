"""The OPA decision-log mask policy (policies/system/log/mask.rego) on a real OPA: it masks what
the gateway's audit masker masks, and OPA's console decision log carries no secret."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway import Authorization, ToolDefinition
from gateway.audit import (
    DEFAULT_MASKED_KEYS,
    DEFAULT_NAME_PATTERNS,
    DEFAULT_VALUE_PATTERNS,
    Masker,
    normalize_name,
)
from gateway.policy import OpaRestEngine, PolicyAuthorizer, caller_context
from gateway.testing import OpaServer
from tests.audit.mask_cases import INNOCENT_NAMES, PLAIN_VALUES, SECRET_VALUES, SENSITIVE_NAMES
from tests.policy.conftest import DECISION_LOGS

POLICIES: Final = Path(__file__).resolve().parents[2] / "policies"
MASK_POLICY: Final = POLICIES / "system"
MASKER: Final = Masker(key=b"k")


@pytest.fixture(scope="module")
def mask_opa(opa_binary: str) -> Iterator[OpaServer]:
    """A real OPA with the mask policy only, for asking it what it would mask."""
    with OpaServer(binary=opa_binary, policy_paths=[MASK_POLICY]) as server:
        yield server


def ask(server: OpaServer, query: str, input_document: Any) -> Any:
    """The binding ``x`` of one ad-hoc query (``POST /v1/query``)."""
    body = json.dumps({"query": query, "input": input_document}).encode()
    request = urllib.request.Request(  # noqa: S310 - always http://127.0.0.1
        f"{server.url}/v1/query", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        answer = json.loads(response.read())
    return answer["result"][0]["x"] if answer.get("result") else None


def opa_names(server: OpaServer, names: list[str]) -> dict[str, list[Any]]:
    query = (
        "x := {n: [data.system.log.normalize_name(n), sensitive] | some n in input; "
        "sensitive := data.system.log.sensitive_name(n)} "
    )
    # A function that is undefined leaves the name out: count those as not sensitive.
    found = ask(server, query, names) or {}
    normalised = ask(server, "x := {n: data.system.log.normalize_name(n) | some n in input}", names)
    return {name: [normalised[name], name in found] for name in names}


def opa_values(server: OpaServer, values: list[str]) -> dict[str, bool]:
    found = ask(server, "x := {v | some v in input; data.system.log.sensitive_value(v)}", values)
    return {value: value in (found or []) for value in values}


# -- the same patterns, the same decisions -----------------------------------------------------


def test_the_policy_carries_the_gateways_default_patterns(mask_opa: OpaServer) -> None:
    actual = ask(
        mask_opa,
        "x := [data.system.log.name_patterns, data.system.log.value_patterns,"
        " sort(data.system.log.default_keys)]",
        {},
    )

    assert actual == [
        list(DEFAULT_NAME_PATTERNS),
        list(DEFAULT_VALUE_PATTERNS),
        sorted(DEFAULT_MASKED_KEYS),
    ]


def test_the_policy_and_the_masker_decide_every_name_of_the_shared_table_alike(
    mask_opa: OpaServer,
) -> None:
    names = [*SENSITIVE_NAMES, *INNOCENT_NAMES]

    actual = opa_names(mask_opa, names)

    expected = {name: [normalize_name(name), MASKER.sensitive_name(name)] for name in names}
    assert actual == expected
    assert all(actual[name][1] for name in SENSITIVE_NAMES)


def test_the_policy_and_the_masker_decide_every_value_of_the_shared_table_alike(
    mask_opa: OpaServer,
) -> None:
    values = [*SECRET_VALUES, *PLAIN_VALUES]

    actual = opa_values(mask_opa, values)

    assert actual == {value: MASKER.sensitive_value(value) for value in values}
    assert all(actual[value] for value in SECRET_VALUES)


NAME_PARTS = st.sampled_from(
    [
        *["pass", "Word", "API", "key", "Key", "token", "_", "-", ".", " ", "2", "x", "Secret"],
        *["sess", "ion", "Auth", "or", "priv", "ate", "PEM", "cred", "ential", "SIG", "pin", "é"],
    ]
)


@settings(max_examples=60)
@given(st.lists(st.lists(NAME_PARTS, max_size=6).map("".join), min_size=1, max_size=25))
@example(names=["APIkey"])  # "ap_ikey" as words: masked only by the exact-name list
@example(names=["xAPIkey", "SECretKey", "pass.Word", "toKen"])  # matched only squashed
def test_the_policy_and_the_masker_agree_on_generated_names(
    mask_opa: OpaServer, names: list[str]
) -> None:
    actual = opa_names(mask_opa, names)

    assert actual == {name: [normalize_name(name), MASKER.sensitive_name(name)] for name in names}


VALUE_PARTS = st.sampled_from(
    [
        *["Bearer ", "bearer", "abcdefgh", "password", "=", ": ", '"', "://", "u", ":", "@"],
        *["eyJ", "eyJhbGciOi", ".", "-----BEGIN ", "RSA ", "PRIVATE KEY", "sk-", "AKIA", " "],
        *["ABCDEFGHIJKLMNOP", "ghp_", "xoxb-", "1234567890", "_live_", "token", "\t", "/"],
        "\u017f",  # LATIN SMALL LETTER LONG S: folds to "s" under (?i) in both engines
    ]
)


@settings(max_examples=60)
@given(st.lists(st.lists(VALUE_PARTS, max_size=8).map("".join), min_size=1, max_size=25))
def test_the_policy_and_the_masker_agree_on_generated_values(
    mask_opa: OpaServer, values: list[str]
) -> None:
    actual = opa_values(mask_opa, values)

    assert actual == {value: MASKER.sensitive_value(value) for value in values}


# -- OPA's own decision log ---------------------------------------------------------------------

SECRETS: Final = {
    "db_password": "pw-Aq19-clear",
    "auth_token": "tok-Bw28-clear",
    "X-API-Key": "key-Ce37-clear",
    "github_token": "gh-Dr46-clear",
    "aws_secret_access_key": "aws-Et55-clear",
    "session_token": "sess-Fy64-clear",
    "secret_key": "sk-Gu73-clear",
    "private_key_pem": "pem-Hi82-clear",
    "cookie": "cookie-Io91-clear",
    "bearer": "bearer-Jp10-clear",
}
ARGUMENTS: Final = {
    **SECRETS,
    "credentials": {"user": "svc-reporting", "password": "cred-Kq29-clear"},
    "headers": [{"accept": "text/plain"}, "Authorization: Bearer hdr-Lr38-clear"],
    "dsn_url": "postgres://app:url-Ms47-clear@db/app",
    "note": "it is pw-Aq19-clear",
    "later": "the header held hdr-Lr38-clear",
    "query": "visible-query",
}
CONTEXT: Final = {
    "subject": "alice",
    "roles": ["reader"],
    "tenant": "acme",
    "session": "ctx-Ou65-clear",
    "token": "ctx-Pv74-clear",
}
ALL_SECRETS: Final = [
    *SECRETS.values(),
    "cred-Kq29-clear",
    "hdr-Lr38-clear",
    "url-Ms47-clear",
    "ctx-Ou65-clear",
    "ctx-Pv74-clear",
]


async def decide_and_read_the_log(
    server: OpaServer, arguments: dict[str, Any] = ARGUMENTS
) -> tuple[str, dict[str, Any]]:
    """One gateway decision with secrets in its input; OPA's log and the decision's event."""
    definition = ToolDefinition("read_file", {"type": "object"})
    authorization = Authorization(definition, json.dumps(arguments).encode())
    async with OpaRestEngine(server.url, timeout=5.0, revision_interval=0) as engine:
        with caller_context(CONTEXT):
            decision = await PolicyAuthorizer(engine).authorize(authorization)
    assert decision.decision_id
    deadline = time.monotonic() + 10.0
    while True:
        log = server.read_log()
        events = [json.loads(line) for line in log.splitlines() if decision.decision_id in line]
        if events:
            return log, events[0]
        assert time.monotonic() < deadline, "OPA never logged the decision"
        await asyncio.sleep(0.02)


#: What docker-compose.yml gives OPA (its /policies is this repository's policies/).
COMPOSE_PATHS: Final = [POLICIES / "gateway", POLICIES / "data.json", MASK_POLICY]


def test_docker_compose_gives_opa_the_mask_policy_and_console_decision_logs() -> None:
    text = (POLICIES.parent / "docker-compose.yml").read_text(encoding="utf-8")
    opa = text.split("\n  gateway:")[0]
    items = [line.split("#")[0].strip()[2:] for line in opa.splitlines()]
    loaded = [item for item in items if item.startswith("/policies/")]

    assert loaded == ["/policies/" + str(path.relative_to(POLICIES)) for path in COMPOSE_PATHS]
    assert "--set=decision_logs.console=true" in items


@pytest.fixture
def logging_opa(opa_binary: str) -> Iterator[OpaServer]:
    """OPA as docker-compose runs it: the shipped policies, the mask policy, console logs."""
    with OpaServer(
        binary=opa_binary, policy_paths=COMPOSE_PATHS, extra_args=[DECISION_LOGS]
    ) as server:
        yield server


@pytest.fixture
def unmasked_opa(opa_binary: str) -> Iterator[OpaServer]:
    """The same OPA without the mask policy."""
    with OpaServer(
        binary=opa_binary,
        policy_paths=[POLICIES / "gateway", POLICIES / "data.json"],
        extra_args=[DECISION_LOGS],
    ) as server:
        yield server


async def test_without_the_mask_policy_opa_logs_the_secrets_in_clear(
    unmasked_opa: OpaServer,
) -> None:
    log, _ = await decide_and_read_the_log(unmasked_opa)

    assert [secret for secret in ALL_SECRETS if secret in log] == ALL_SECRETS


async def test_with_the_mask_policy_opa_logs_no_secret(logging_opa: OpaServer) -> None:
    log, event = await decide_and_read_the_log(logging_opa)

    assert [secret for secret in ALL_SECRETS if secret in log] == []
    arguments = event["input"]["arguments"]
    assert {name: arguments[name] for name in SECRETS} == dict.fromkeys(SECRETS, "masked")
    assert arguments["credentials"] == "masked"
    assert arguments["headers"] == [{"accept": "text/plain"}, "masked"]
    assert (arguments["dsn_url"], arguments["note"], arguments["later"]) == ("masked",) * 3
    assert arguments["query"] == "visible-query"
    assert event["input"]["context"] == {**CONTEXT, "session": "masked", "token": "masked"}
    assert "/input/arguments/db_password" in event["masked"]
    assert "/input/context/token" in event["masked"]
    assert event["result"]["allow"] in (True, False)


async def test_a_member_opa_cannot_address_has_its_container_masked_in_the_log(
    logging_opa: OpaServer,
) -> None:
    arguments = {"odd name/with slash": {"token": "odd-Nt56-clear"}, "query": "q"}

    log, event = await decide_and_read_the_log(logging_opa, arguments)

    assert "odd-Nt56-clear" not in log
    assert event["input"]["arguments"] == "masked"
    assert "/input/arguments" in event["masked"]


ECHO_POLICY: Final = """package gateway.authz

decision := {
	"allow": false,
	"message": sprintf("refused %s", [input.arguments.db_password]),
	"reasons": ["ok", concat(" ", ["saw", input.context.token])],
}
"""


async def test_a_policy_result_that_echoes_a_secret_is_masked_in_the_log(
    opa_binary: str, tmp_path: Path
) -> None:
    (tmp_path / "echo.rego").write_text(ECHO_POLICY, encoding="utf-8")
    with OpaServer(
        binary=opa_binary, policy_paths=[tmp_path, MASK_POLICY], extra_args=[DECISION_LOGS]
    ) as server:
        log, event = await decide_and_read_the_log(server)

    assert [secret for secret in ALL_SECRETS if secret in log] == []
    assert event["result"] == {"allow": False, "message": "masked", "reasons": ["ok", "masked"]}
    assert {"/result/message", "/result/reasons/1"} <= set(event["masked"])
