"""Differential test: the shipped policies decide identically on OPA and on the embedded engine.

Every input of a deterministic corpus (see ``differential_corpus``) goes through the real
:class:`PolicyAuthorizer` and :class:`InputDocument` on two engines: the embedded engine
(OPA's own WebAssembly of the shipped policies, ``opa build -t wasm``, in process) and a
real OPA server over REST, both loading the same module files (``policies/**/*.rego``
without ``*_test.rego``) and the same data. The two must agree on ``allow``, ``message``,
``reasons`` and ``cache.ttl_s``, or fail with the same error code. The corpus is also run
against changed data (defaults, malformed and missing settings, no data at all) so that the
misconfiguration branches are compared too. Input shapes the gateway cannot build (a tool
name that is not a string, a context that is not an object) are out of reach here; the
``opa test`` suites cover them on OPA.

Nothing is excluded: inputs with numbers binary64 cannot hold (2^53 + 1, long decimals,
``1e400``) are compared like any other, and the corpus must hold such inputs. Everything
must match exactly; a mismatch is a finding, reported with its input.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import pytest

from gateway import Authorization
from gateway.policy import (
    DEFAULT_DECISION_PATH,
    EmbeddedEngine,
    InputDocument,
    OpaRestEngine,
    PolicyAuthorizer,
    PolicyEngine,
    PolicyError,
    caller_context,
    read_policy_data,
)
from gateway.policy._bundle import Bundle
from gateway.testing import OpaServer
from tests.policy.differential_corpus import Case, build_corpus, data_variants
from tests.policy.wasm_support import built_bundle

POLICY_DIR: Final = Path(__file__).resolve().parents[2] / "policies"

#: Concurrent decisions in flight per engine.
BATCH: Final = 64
#: The smallest corpus the test accepts for the shipped data, so it cannot pass vacuously.
MIN_CORPUS: Final = 2000
#: Every variant compares every STRIDE-th input of the corpus (all of them for the base data).
VARIANT_STRIDE: Final = 10
#: binary64 holds every integer up to this magnitude exactly (the corpus goes beyond it).
EXACT_INT_LIMIT: Final = 2**53


@dataclass(frozen=True, slots=True)
class Verdict:
    """A decision, reduced to what the contract fixes."""

    allowed: bool
    message: str | None
    reasons: tuple[str, ...]
    ttl: float | None


@dataclass(frozen=True, slots=True)
class Refusal:
    """No decision: the engine's error code."""

    code: str


Outcome = Verdict | Refusal


@dataclass(frozen=True, slots=True)
class Report:
    """What one run compared."""

    compared: int
    allowed: int
    denied: int
    refused: int


def _policy_files() -> list[Path]:
    files = sorted(
        path for path in POLICY_DIR.rglob("*.rego") if not path.name.endswith("_test.rego")
    )
    return [*files, POLICY_DIR / "data.json"]


@pytest.fixture(scope="module")
def shipped_data() -> Any:
    """The shipped data document, as OPA loads it."""
    return read_policy_data(POLICY_DIR)


@pytest.fixture(scope="module")
def shipped_bundle(opa_binary: str) -> Bundle:
    """The shipped policies compiled by ``opa build -t wasm`` from the working tree."""
    return built_bundle(opa_binary, str(POLICY_DIR), (DEFAULT_DECISION_PATH,))


@pytest.fixture(scope="module")
def shipped_opa(opa_binary: str) -> Iterator[OpaServer]:
    """A real OPA serving exactly the files the embedded engine loads (no test modules)."""
    with OpaServer(binary=opa_binary, policy_paths=_policy_files()) as server:
        yield server


@pytest.fixture(scope="module")
def corpus() -> list[Case]:
    """The corpus for the shipped data (built once per module)."""
    return build_corpus()


def _holds_inexact_number(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, int) and not isinstance(node, bool):
            if abs(node) > EXACT_INT_LIMIT and int(float(node)) != node:
                return True
        elif isinstance(node, Decimal) and not _round_trips(node):
            return True
    return False


def _round_trips(number: Decimal) -> bool:
    # The shortest repr of the nearest double gives the decimal back: no other short
    # decimal shares that double, so comparisons keep their outcome.
    nearest = float(number)
    return nearest not in (float("inf"), float("-inf")) and Decimal(repr(nearest)) == number


def _is_inexact(case: Case) -> bool:
    document = InputDocument(Authorization(case.definition, case.arguments), case.context)
    return _holds_inexact_number(document.to_dict())


async def _decide(authorizer: PolicyAuthorizer, case: Case) -> Outcome:
    authorization = Authorization(case.definition, case.arguments)
    with caller_context(case.context):
        try:
            decision = await authorizer.authorize(authorization)
        except PolicyError as exc:
            return Refusal(exc.code)
    return Verdict(decision.allowed, decision.message, decision.reasons, decision.cache_ttl)


async def _decide_both(
    embedded: PolicyEngine, opa: PolicyEngine, cases: Sequence[Case]
) -> tuple[list[Outcome], list[Outcome]]:
    # No cache: every input is evaluated. Within a batch the OPA requests go out first;
    # the embedded engine then evaluates inline while OPA works on them.
    mine, theirs = PolicyAuthorizer(embedded), PolicyAuthorizer(opa)
    embedded_outcomes: list[Outcome] = []
    opa_outcomes: list[Outcome] = []
    for start in range(0, len(cases), BATCH):
        batch = cases[start : start + BATCH]
        outcomes = await asyncio.gather(
            *(_decide(theirs, case) for case in batch), *(_decide(mine, case) for case in batch)
        )
        opa_outcomes += outcomes[: len(batch)]
        embedded_outcomes += outcomes[len(batch) :]
    return embedded_outcomes, opa_outcomes


def _describe(case: Case) -> str:
    return json.dumps(
        {
            "label": case.label,
            "tool": case.definition.name,
            "arguments": case.arguments.decode("utf-8")[:400],
            "context": case.context.json.decode("utf-8")[:300],
        },
        ensure_ascii=True,
    )


def _compare(
    cases: Sequence[Case], embedded: Sequence[Outcome], opa: Sequence[Outcome]
) -> tuple[Report, list[str]]:
    assert len(embedded) == len(opa) == len(cases)
    mismatches: list[str] = []
    allowed = denied = refused = 0
    for case, mine, theirs in zip(cases, embedded, opa, strict=True):
        if mine != theirs:
            mismatches.append(f"{_describe(case)}\n  embedded: {mine}\n  opa:      {theirs}")
        elif isinstance(mine, Refusal):
            refused += 1
        elif mine.allowed:
            allowed += 1
        else:
            denied += 1
    return Report(allowed + denied + refused, allowed, denied, refused), mismatches


def _embedded_engine(bundle: Bundle, data: Any) -> EmbeddedEngine:
    # The same data document OPA is given, written out as UTF-8 (no escaped pairs). A batch
    # waits at once: a deadline as generous as OPA's, so that a loaded machine shows as
    # slowness, not as disagreement.
    encoded = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return EmbeddedEngine(
        dataclasses.replace(bundle, data=encoded, revision="differential"), timeout_s=30.0
    )


async def _differential(
    name: str, bundle: Bundle, data: Any, server: OpaServer, cases: Sequence[Case]
) -> Report:
    await asyncio.to_thread(server.put_data, "", data)
    started = time.perf_counter()
    with _embedded_engine(bundle, data) as mine:
        async with OpaRestEngine(server.url, timeout=30.0, revision_interval=0) as opa_engine:
            embedded, opa = await _decide_both(mine, opa_engine, cases)
    report, mismatches = _compare(cases, embedded, opa)
    elapsed = time.perf_counter() - started
    print(
        f"differential[{name}]: compared {report.compared} inputs "
        f"({report.allowed} allowed, {report.denied} denied, {report.refused} refused by both);"
        f" {elapsed:.1f} s"
    )
    shown = "\n".join(mismatches[:10])
    assert not mismatches, f"{len(mismatches)} of {len(cases)} inputs disagree:\n{shown}"
    return report


async def test_engines_agree_on_every_input_of_the_shipped_data(
    shipped_bundle: Bundle, shipped_data: Any, shipped_opa: OpaServer, corpus: list[Case]
) -> None:
    assert len(corpus) >= MIN_CORPUS
    report = await _differential("shipped", shipped_bundle, shipped_data, shipped_opa, corpus)
    assert report.compared == len(corpus)
    assert report.allowed >= 100, "the corpus must hold allowed calls"
    assert report.denied >= 1000, "the corpus must hold denied calls"
    inexact = sum(_is_inexact(case) for case in corpus)
    assert inexact >= 10, "the corpus must hold numbers binary64 cannot represent"


@pytest.mark.parametrize(
    "variant",
    [name for name, _ in data_variants(json.loads((POLICY_DIR / "data.json").read_bytes()))],
)
async def test_engines_agree_on_changed_data(
    variant: str,
    shipped_bundle: Bundle,
    shipped_data: Any,
    shipped_opa: OpaServer,
    corpus: list[Case],
) -> None:
    data = dict(data_variants(shipped_data))[variant]
    cases = corpus[::VARIANT_STRIDE]
    report = await _differential(variant, shipped_bundle, data, shipped_opa, cases)
    assert report.compared == len(cases)
    assert report.compared >= MIN_CORPUS // VARIANT_STRIDE
    assert report.denied > 0


def test_corpus_is_deterministic() -> None:
    first = build_corpus(fuzz=300)
    second = build_corpus(fuzz=300)
    assert [(c.label, c.definition.name, c.arguments, c.context) for c in first] == [
        (c.label, c.definition.name, c.arguments, c.context) for c in second
    ]


def test_a_disagreement_is_reported() -> None:
    cases = build_corpus(fuzz=0)[:3]
    agreed = Verdict(False, "no", ("rbac: x",), 60.0)
    embedded: list[Outcome] = [agreed, agreed, Refusal("engine_error")]
    opa: list[Outcome] = [agreed, Verdict(False, "no", ("rbac: y",), 60.0), agreed]
    report, mismatches = _compare(cases, embedded, opa)
    assert report == Report(compared=1, allowed=0, denied=1, refused=0)
    assert len(mismatches) == 2
    assert cases[1].label in mismatches[0]
    assert "rbac: y" in mismatches[0]
