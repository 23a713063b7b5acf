"""The policy gate: every served tool has a decision path whose settings match its schema.

The checks are the policy's own: the gate rule ``data.gateway.authz.gate.problems`` of the
policy library (``policies/gateway/authz/gate.rego``), compiled into the bundle beside the
decision and evaluated by the embedded engine. This module only hands the rule the served
tools, as the decision input has them, and reads its answer; it knows no kind and no
setting, so a kind added to the library is checked by the library.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from gateway._definition import ToolDefinition
from gateway.policy._document import _tool_json
from gateway.policy._errors import PolicyError
from gateway.policy._facts import json_pointer, sql_locations
from gateway.policy._wasm import EmbeddedEngine

Severity = Literal["error", "warning"]

#: The rule the policy answers the gate on (compile it as an entrypoint of the bundle).
GATE_PATH: Final = "gateway/authz/gate/problems"

_SEVERITIES: Final = ("error", "warning")
_MAX_PROBLEMS: Final = 100_000


class GateError(PolicyError):
    """The policy gives the gate no usable answer (no gate rule, or a malformed one)."""

    code: ClassVar[str] = "gate_error"


@dataclass(frozen=True, slots=True)
class GateProblem:
    """One finding of the policy gate.

    Attributes:
        tool: the tool name the finding is about.
        problem: what is wrong and what it does to calls, for an operator.
        severity: ``"error"`` (the tool cannot be called as intended, or a check is
            silently skipped) or ``"warning"`` (suspicious but harmless to decisions).
    """

    tool: str
    problem: str
    severity: Severity = "error"


def gate_input(definitions: Iterable[ToolDefinition]) -> bytes:
    """The gate rule's input: the served tools (first of each name) and their facts.

    ``{"tools": [{"tool": <the tool as the decision input has it>, "facts": {"sql":
    [<JSON pointer of each argument the gateway gives SQL facts for>]}}, ...]}``.
    """
    served: dict[str, ToolDefinition] = {}
    for definition in definitions:
        served.setdefault(definition.name, definition)
    entries = []
    for definition in served.values():
        pointers = sorted(
            json_pointer(tuple(token for token in location if token is not None))
            for location in sql_locations(definition)
            if None not in location
        )
        entries.append(
            b'{"facts":'
            + json.dumps({"sql": pointers}, ensure_ascii=False, separators=(",", ":")).encode()
            + b',"tool":'
            + _tool_json(definition)
            + b"}"
        )
    return b'{"tools":[' + b",".join(entries) + b"]}"


def check_policy_coverage(
    definitions: Iterable[ToolDefinition], engine: EmbeddedEngine
) -> list[GateProblem]:
    """Ask the policy whether every served tool has a decision path.

    Evaluates :data:`GATE_PATH` on ``engine`` (whose bundle must have it as an
    entrypoint: ``scripts/build-bundle`` compiles it) over the served tools. The shipped
    library reports, for each served tool: no settings or an unknown kind, no role
    granting it, a setting that names an argument the input schema does not declare (or
    declares with a type the setting cannot take), a malformed or missing required
    setting, an argument that needs parser facts the gateway does not give for it, and
    what each module adds; warnings for a configured argument the schema does not
    require, a setting the tool's kind ignores, and settings for a tool not served (see
    ``policies/gateway/authz/gate.rego``).

    Args:
        definitions: the tools the gateway serves.
        engine: an embedded engine serving the policy and its data.

    Returns:
        The problems: per served tool in the order given (errors first, then by text),
        then those about tools that are not served, by name. Empty when sound.

    Raises:
        GateError: the bundle has no gate entrypoint, or the answer is not a set of
            ``{"tool", "severity", "problem"}`` objects.
        EngineError: the evaluation failed (its subclasses say how).
    """
    definitions = list(definitions)
    if GATE_PATH not in engine.entrypoints:
        raise GateError(
            f"the policy bundle has no gate entrypoint ({GATE_PATH}): build it with "
            "scripts/build-bundle"
        )
    answer = engine.evaluate_sync(GATE_PATH, gate_input(definitions))
    if not answer.defined:
        raise GateError("the policy's gate rule is undefined")
    problems = _problems(answer.value)
    order: dict[str, int] = {}
    for definition in definitions:
        order.setdefault(definition.name, len(order))
    unserved = len(order)
    problems.sort(
        key=lambda p: (
            order.get(p.tool, unserved),
            p.tool,
            _SEVERITIES.index(p.severity),
            p.problem,
        )
    )
    return problems


def _problems(value: Any) -> list[GateProblem]:
    if not isinstance(value, list) or len(value) > _MAX_PROBLEMS:
        raise GateError("the policy's gate answer is not a set of problems")
    problems: list[GateProblem] = []
    for item in value:
        if not isinstance(item, Mapping) or set(item) != {"tool", "severity", "problem"}:
            raise GateError("the policy's gate answer holds a malformed problem")
        tool, severity, problem = item["tool"], item["severity"], item["problem"]
        if not (isinstance(tool, str) and isinstance(problem, str) and severity in _SEVERITIES):
            raise GateError("the policy's gate answer holds a malformed problem")
        problems.append(GateProblem(tool, problem, severity))
    return problems
