"""Differential test: the shipped policies decide identically on OPA and on regorus.

Every input of a deterministic corpus (see ``differential_corpus``) goes through the real
:class:`PolicyAuthorizer` and :class:`InputDocument` on two engines: the embedded engine
(regorus, in process) and a real OPA server over REST, both loading the same module files
(``policies/**/*.rego`` without ``*_test.rego``) and the same data. The two must agree on
``allow``, ``message``, ``reasons`` and ``cache.ttl_s``, or fail with the same error code.
The corpus is also run against changed data (defaults, malformed and missing settings, no
data at all) so that the misconfiguration branches are compared too. Input shapes the
gateway cannot build (a tool name that is not a string, a context that is not an object)
are out of reach here; the ``opa test`` suites cover them on OPA.

Where the engines cannot agree, by design:

* **Numbers beyond binary64.** regorus reads every number as a binary64 float; OPA keeps
  arbitrary precision. A number whose nearest double does not round-trip to it (an integer
  that binary64 cannot hold, such as 2^53 + 1; a decimal with more digits than a double
  keeps, such as ``0.1000000000000000001``; ``1e400``) could compare differently, so the
  embedded engine refuses (``engine_error``) any input holding one instead of silently
  rounding it. Short decimals such as ``0.01`` and ``19.99`` round-trip and are compared
  like any other input. Refused inputs are checked for exactly that refusal on the
  embedded engine and are not compared; they are counted.
* **Rego constructs the library avoids** (policies/README.md, "Writing rules that run on
  both engines"): builtin errors (OPA: undefined, regorus: an error), ``not`` over a
  builtin call or ``in`` on an undefined reference (OPA: undefined, regorus: true),
  ``to_number`` on text such as ``"0443"``, ``sprintf("%v")`` of caller floats, ``%q``,
  the regex classes ``\\b``, ``\\s``, ``\\w`` and ``(?i)`` (Unicode semantics differ), and
  ``lower``/``trim_space`` on non-ASCII text, plus engine-specific builtins
  (``http.send``, ``io.jwt.*``, ``crypto.*``, ``net.cidr_contains_matches``,
  ``time.now_ns``). The shipped policies use none of them on caller input; this test is
  what keeps it that way.

Everything else must match exactly; a mismatch is a finding, reported with its input.
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
    PolicySources,
    caller_context,
)
from gateway.policy._bundle import Bundle
from gateway.policy._wasm import WasmEngine
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
#: binary64 holds every integer up to this magnitude exactly.
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
    inexact: int


def _policy_files() -> list[Path]:
    files = sorted(
        path for path in POLICY_DIR.rglob("*.rego") if not path.name.endswith("_test.rego")
    )
    return [*files, POLICY_DIR / "data.json"]


@pytest.fixture(scope="module")
def shipped_sources() -> PolicySources:
    """The shipped policy set, as the embedded engine loads it."""
    return PolicySources.from_directory(POLICY_DIR)


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
    cases: Sequence[Case],
    embedded: Sequence[Outcome],
    opa: Sequence[Outcome],
    *,
    refuses_inexact: bool = True,
) -> tuple[Report, list[str]]:
    assert len(embedded) == len(opa) == len(cases)
    mismatches: list[str] = []
    allowed = denied = refused = inexact = 0
    for case, mine, theirs in zip(cases, embedded, opa, strict=True):
        if refuses_inexact and _is_inexact(case):
            inexact += 1
            if mine != Refusal("engine_error"):
                mismatches.append(f"inexact number not refused by embedded: {_describe(case)}")
            if not isinstance(theirs, Verdict):
                mismatches.append(f"OPA gave no decision on exact numbers: {_describe(case)}")
            continue
        if mine != theirs:
            mismatches.append(f"{_describe(case)}\n  embedded: {mine}\n  opa:      {theirs}")
        elif isinstance(mine, Refusal):
            refused += 1
        elif mine.allowed:
            allowed += 1
        else:
            denied += 1
    compared = allowed + denied + refused
    return Report(compared, allowed, denied, refused, inexact), mismatches


async def _differential(
    name: str,
    sources: PolicySources,
    server: OpaServer,
    cases: Sequence[Case],
    *,
    engine: PolicyEngine | None = None,
) -> Report:
    # ``engine``: an engine other than regorus to hold against OPA; it must refuse nothing.
    await asyncio.to_thread(server.put_data, "", dict(sources.data))
    started = time.perf_counter()
    async with OpaRestEngine(server.url, timeout=30.0, revision_interval=0) as opa_engine:
        # A whole batch waits for the embedded workers at once: a deadline as generous as
        # OPA's, so that a loaded machine shows as slowness, not as disagreement.
        mine = EmbeddedEngine(sources, timeout=30.0) if engine is None else engine
        embedded, opa = await _decide_both(mine, opa_engine, cases)
    report, mismatches = _compare(cases, embedded, opa, refuses_inexact=engine is None)
    elapsed = time.perf_counter() - started
    print(
        f"differential[{name}]: compared {report.compared} inputs "
        f"({report.allowed} allowed, {report.denied} denied, {report.refused} refused by both);"
        f" {report.inexact} with inexact numbers refused by embedded, not compared;"
        f" {elapsed:.1f} s"
    )
    shown = "\n".join(mismatches[:10])
    assert not mismatches, f"{len(mismatches)} of {len(cases)} inputs disagree:\n{shown}"
    return report


async def test_engines_agree_on_the_shipped_data(
    shipped_sources: PolicySources, shipped_opa: OpaServer, corpus: list[Case]
) -> None:
    assert len(corpus) >= MIN_CORPUS
    report = await _differential("shipped", shipped_sources, shipped_opa, corpus)
    assert report.compared >= MIN_CORPUS
    assert report.allowed >= 100, "the corpus must hold allowed calls"
    assert report.denied >= 1000, "the corpus must hold denied calls"
    assert report.inexact >= 10, "the corpus must hold numbers binary64 cannot represent"


@pytest.mark.parametrize(
    "variant",
    [name for name, _ in data_variants(json.loads((POLICY_DIR / "data.json").read_bytes()))],
)
async def test_engines_agree_on_changed_data(
    variant: str, shipped_sources: PolicySources, shipped_opa: OpaServer, corpus: list[Case]
) -> None:
    data = dict(data_variants(shipped_sources.data))[variant]
    sources = PolicySources(shipped_sources.modules, data, f"variant-{variant}")
    cases = corpus[::VARIANT_STRIDE]
    report = await _differential(variant, sources, shipped_opa, cases)
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
    assert report == Report(compared=1, allowed=0, denied=1, refused=0, inexact=0)
    assert len(mismatches) == 2
    assert cases[1].label in mismatches[0]
    assert "rbac: y" in mismatches[0]


# -- the WebAssembly engine: OPA's own compiled policy, held to the same corpus ------------


@pytest.fixture(scope="module")
def shipped_bundle(opa_binary: str) -> Bundle:
    """The shipped policies compiled by ``opa build -t wasm`` from the working tree."""
    return built_bundle(opa_binary, str(POLICY_DIR), (DEFAULT_DECISION_PATH,))


def _wasm_engine(bundle: Bundle, data: Any) -> WasmEngine:
    # The same data document OPA is given, written out as UTF-8 (no escaped pairs).
    encoded = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return WasmEngine(dataclasses.replace(bundle, data=encoded, revision="differential"))


async def test_wasm_engine_agrees_with_opa_on_every_input_of_the_shipped_data(
    shipped_sources: PolicySources,
    shipped_opa: OpaServer,
    corpus: list[Case],
    shipped_bundle: Bundle,
) -> None:
    engine = _wasm_engine(shipped_bundle, shipped_sources.data)
    report = await _differential("wasm", shipped_sources, shipped_opa, corpus, engine=engine)
    # Nothing is refused for being inexact: inputs with numbers beyond binary64 are compared.
    assert report.inexact == 0
    assert report.compared == len(corpus)
    assert sum(_is_inexact(case) for case in corpus) >= 10
    assert report.allowed >= 100
    assert report.denied >= 1000


@pytest.mark.parametrize(
    "variant",
    [name for name, _ in data_variants(json.loads((POLICY_DIR / "data.json").read_bytes()))],
)
async def test_wasm_engine_agrees_with_opa_on_changed_data(
    variant: str,
    shipped_sources: PolicySources,
    shipped_opa: OpaServer,
    corpus: list[Case],
    shipped_bundle: Bundle,
) -> None:
    data = dict(data_variants(shipped_sources.data))[variant]
    sources = PolicySources(shipped_sources.modules, data, f"variant-{variant}")
    cases = corpus[::VARIANT_STRIDE]
    engine = _wasm_engine(shipped_bundle, data)
    report = await _differential(f"wasm-{variant}", sources, shipped_opa, cases, engine=engine)
    assert report.compared == len(cases)
    assert report.denied > 0
