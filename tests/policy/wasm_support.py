"""Wasm bundles for the engine tests, compiled from the working tree by the real ``opa build``.

Bundles and engines are built once per test session and policy directory: ``opa build`` and
wasmtime's compilation take about a second each.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Final

from gateway.policy._bundle import Bundle, build_bundle, read_bundle
from gateway.policy._wasm import WasmEngine
from tests.policy.conftest import DECISION, REGO_DIR

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
def contract_engine(opa_binary: str) -> WasmEngine:
    """One wasm engine serving the test policy (stateless, so shared by the contract tests)."""
    bundle = built_bundle(opa_binary, str(REGO_DIR), CONTRACT_ENTRYPOINTS)
    return WasmEngine(bundle, identity="wasm:test-policy")
