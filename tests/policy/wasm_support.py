"""Wasm bundles for the engine tests, compiled from the working tree by the real ``opa build``.

Bundles and engines are built once per test session and policy directory: ``opa build`` and
wasmtime's compilation take about a second each.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
from pathlib import Path
from typing import Any, Final

from gateway import Authorization
from gateway.policy import (
    CallerContext,
    EmbeddedEngine,
    OpaRestEngine,
    PathView,
    PolicyAuthorizer,
    caller_context,
)
from gateway.policy._bundle import Bundle, build_bundle, digest_revision, read_bundle
from gateway.testing import OpaServer
from tests.policy.conftest import DECISION, POLICY_DIR, REGO_DIR, provisioned_opa

#: The rules of the test policy the contract asks for, each compiled as an entrypoint.
FAULT_RULES: Final = (
    "bool_false",
    "bool_true",
    "conflict",
    "extra_members",
    "negative_ttl",
    "nested_sets",
    "nothing",
    "null_allow",
    "null_decision",
    "number",
    "number_allow",
    "reasons_not_strings",
    "set_reasons",
    "string_allow",
    "string_true_allow",
)
CONTRACT_ENTRYPOINTS: Final = (DECISION, *(f"gateway/faults/{rule}" for rule in FAULT_RULES))


@functools.cache
def built_bundle(opa_binary: str, policy_dir: str, entrypoints: tuple[str, ...]) -> Bundle:
    """The bundle ``opa build -b -t wasm`` makes of the directory's non-test files."""
    with tempfile.TemporaryDirectory(prefix="wasm-test-") as scratch:
        output = build_bundle(
            opa_binary, policy_dir, Path(scratch, "bundle.tar.gz"), entrypoints=entrypoints
        )
        return read_bundle(output)


@functools.cache
def contract_engine(opa_binary: str) -> EmbeddedEngine:
    """One engine serving the test policy (stateless, so shared by the contract tests)."""
    bundle = built_bundle(opa_binary, str(REGO_DIR), CONTRACT_ENTRYPOINTS)
    return EmbeddedEngine(bundle, identity="embedded:test-policy")


def shipped_bundle(data: Any = None) -> Bundle:
    """The working tree's shipped policies compiled to wasm, with other ``data`` if given."""
    bundle = built_bundle(provisioned_opa(), str(POLICY_DIR), (DECISION,))
    if data is None:
        return bundle
    encoded = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return dataclasses.replace(bundle, data=encoded, revision=digest_revision(bundle.wasm, encoded))


def shipped_engine(data: Any = None, **options: Any) -> EmbeddedEngine:
    """An embedded engine serving the shipped policies (and other ``data`` if given)."""
    return EmbeddedEngine(shipped_bundle(data), **options)


async def decide_on_both_engines(
    embedded: EmbeddedEngine,
    server: OpaServer,
    authorization: Authorization,
    context: CallerContext,
    *,
    path_view: PathView | None = None,
) -> list[tuple[bool, str | None]]:
    """``(allowed, message)`` of one call on the embedded engine, then on the OPA server."""
    outcomes: list[tuple[bool, str | None]] = []
    async with OpaRestEngine(server.url, timeout=30.0, revision_interval=0) as rest:
        for engine in (embedded, rest):
            with caller_context(context):
                authorizer = PolicyAuthorizer(engine, path_view=path_view)
                decision = await authorizer.authorize(authorization)
            outcomes.append((decision.allowed, decision.message))
    return outcomes


def shipped_opa_server(opa_binary: str) -> OpaServer:
    """A real OPA serving the shipped modules and data (no test modules); use ``with``."""
    files = sorted(p for p in POLICY_DIR.rglob("*.rego") if not p.name.endswith("_test.rego"))
    return OpaServer(binary=opa_binary, policy_paths=[*files, POLICY_DIR / "data.json"])
