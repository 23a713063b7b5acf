"""Architecture rules of the core: the contract never holds the executable, layers point down."""

from __future__ import annotations

import ast
import gc
import types
import weakref
from collections import deque
from pathlib import Path

from typing_extensions import get_protocol_members

from gateway import (
    Binding,
    Contract,
    Func,
    Invocation,
    Tool,
    ToolCall,
    _contract,
    bind,
)
from tests.helpers import RecordingValidator, ValidatingTool

PACKAGE = Path(__file__).resolve().parent.parent / "gateway"
CORE_MODULES = [
    "_call",
    "_contract",
    "_definition",
    "_errors",
    "_failure",
    "_func",
    "_json",
    "_output",
    "_registry",
    "_schema",
]
FORBIDDEN_LAYERS = ("gateway.policy", "gateway.server", "gateway.audit", "gateway.cli")


class Resource:
    """Something a tool captures that must be collectable once only the contract remains."""


def test_contract_invocation_and_binding_slots_are_exactly_these() -> None:
    assert Contract.__slots__ == ("_state",)
    assert Invocation.__slots__ == ("_arguments", "_call_id", "_decoded", "_state")
    assert Binding.__slots__ == ("_contract", "_tool")
    assert _contract._ContractState.__slots__ == (
        "definition",
        "limits",
        "schema",
        "valid",
        "valid_bytes",
        "validator",
    )


def test_contract_state_holds_no_tool_and_no_bound_method_of_one() -> None:
    tool = ValidatingTool(RecordingValidator())
    binding = bind(tool)
    state = binding.contract._state

    fields = {name: getattr(state, name) for name in _contract._ContractState.__slots__}

    assert [name for name, value in fields.items() if isinstance(value, Tool)] == []
    assert getattr(state.validator, "__self__", None) is None
    assert binding._tool is tool


def _reachable(root: object, *, limit: int = 200_000) -> set[int]:
    """Ids of objects reachable from `root`, not descending into modules, classes or globals."""
    seen: set[int] = set()
    queue: deque[object] = deque([root])
    while queue and len(seen) < limit:
        node = queue.popleft()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, types.ModuleType | type):
            continue
        if isinstance(node, dict) and "__builtins__" in node:
            continue  # a module's globals
        queue.extend(gc.get_referents(node))
    return seen


def test_nothing_reachable_from_a_contract_or_invocation_is_the_tool() -> None:
    def search(query: str) -> str:
        return query

    tool = Func(search)
    binding = bind(tool)
    invocation = binding.contract.prepare(ToolCall("call", "search", '{"query":"ok"}'))

    reachable = _reachable(binding.contract) | _reachable(invocation)

    assert id(tool) not in reachable
    assert id(search) not in reachable
    assert {id(tool), id(search)} <= _reachable(binding)  # the walk does find them when held


def _bound_contract_of_a_func_holding(resource: Resource) -> Contract:
    def probe(query: str) -> str:
        return f"{query} {resource!r}"

    return bind(Func(probe)).contract


def test_case19_a_dropped_func_is_collected_while_its_contract_lives() -> None:
    resource = Resource()
    alive = weakref.ref(resource)
    contract = _bound_contract_of_a_func_holding(resource)

    del resource
    gc.collect()

    assert alive() is None
    assert contract.prepare(ToolCall("call", "probe", '{"query":"ok"}')).arguments == (
        b'{"query":"ok"}'
    )


def test_func_has_exactly_three_public_methods() -> None:
    public = sorted(name for name in dir(Func) if not name.startswith("_"))

    assert public == ["call", "definition", "input_validator"]


def test_tool_protocol_has_exactly_two_members() -> None:
    assert sorted(get_protocol_members(Tool)) == ["call", "definition"]


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = "gateway" + ("." + node.module if node.module else "")
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _core_modules() -> list[Path]:
    return sorted(path for path in PACKAGE.glob("_*.py") if not path.stem.startswith("__"))


def test_core_modules_never_import_policy_server_audit_or_cli() -> None:
    violations = {
        path.name: sorted(
            name for name in _imported_modules(path) if name.startswith(FORBIDDEN_LAYERS)
        )
        for path in _core_modules()
    }

    assert {module: names for module, names in violations.items() if names} == {}


def test_the_core_modules_checked_include_every_module_of_the_tool_core() -> None:
    checked = {path.stem for path in _core_modules()}

    assert checked >= set(CORE_MODULES)


def _core_import_graph(package: Path) -> dict[str, set[str]]:
    # Every import counts, those under TYPE_CHECKING too: that is where a cycle hides. A name
    # imported from the package itself (not one of its modules) depends on ``__init__``.
    stems = {path.stem for path in package.glob("_*.py")}
    graph: dict[str, set[str]] = {}
    for stem in stems:
        edges: set[str] = set()
        for name in _imported_modules(package / f"{stem}.py"):
            parts = name.split(".")
            if parts[0] != "gateway" or len(parts) < 2:
                continue
            if parts[1] in stems:
                edges.add(parts[1])
            elif len(parts) == 2 and not (package / parts[1]).is_dir():
                edges.add("__init__")
        graph[stem] = edges - {stem}
    return graph


def _import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            cycles.append([*path[path.index(node) :], node])
            return
        if node in done:
            return
        for target in sorted(graph.get(node, ())):
            visit(target, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return cycles


def test_the_core_has_no_import_cycle() -> None:
    assert _import_cycles(_core_import_graph(PACKAGE)) == []


def test_the_cycle_checker_finds_a_cycle_hidden_under_type_checking(tmp_path: Path) -> None:
    (tmp_path / "_a.py").write_text("from gateway._b import B\n", encoding="utf-8")
    (tmp_path / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gateway._a import A\n",
        encoding="utf-8",
    )
    (tmp_path / "_c.py").write_text("from gateway import Thing\n", encoding="utf-8")
    (tmp_path / "__init__.py").write_text("from gateway._c import Thing\n", encoding="utf-8")

    assert _import_cycles(_core_import_graph(tmp_path)) == [
        ["__init__", "_c", "__init__"],
        ["_a", "_b", "_a"],
    ]


def test_the_import_checker_sees_every_import_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import gateway.policy\n"
        "from gateway import server\n"
        "from gateway.audit import sink\n"
        "from .cli import main\n"
        "def later() -> None:\n"
        "    import gateway.cli as c\n",
        encoding="utf-8",
    )

    forbidden = sorted(
        name for name in _imported_modules(sample) if name.startswith(FORBIDDEN_LAYERS)
    )

    assert forbidden == [
        "gateway.audit",
        "gateway.audit.sink",
        "gateway.cli",
        "gateway.cli.main",
        "gateway.policy",
        "gateway.server",
    ]


# Layer rules: every layer's imports point down, and siblings keep to each other's public face.
# A rule is (layer, forbidden import prefix, why). A prefix ending in "._" forbids the private
# modules of that package only.
# The surfaces, above the service layer; gateway.replay sits beside the audit trail (it reads
# trails and evaluates policies) and the service layer may use it.
_SURFACES = ("gateway.service", "gateway.server", "gateway.mcp", "gateway.cli")
_BELOW = ("gateway.policy", "gateway.audit", "gateway.replay", "gateway.testing")
LAYER_RULES: tuple[tuple[str, str, str], ...] = (
    *(("core", layer, "the core knows no layer") for layer in (*_BELOW, *_SURFACES)),
    ("policy", "gateway.audit", "the policy layer plugs into the core only as an Authorizer"),
    ("policy", "gateway.replay", "the policy layer knows nothing of replay"),
    *(("policy", layer, "policy never imports surfaces") for layer in _SURFACES),
    ("policy", "gateway.testing", "fakes are for tests"),
    ("audit", "gateway.policy._", "audit reads the policy layer's public face only"),
    ("audit", "gateway.replay", "the audit trail knows nothing of replay"),
    *(("audit", layer, "audit never imports surfaces") for layer in _SURFACES),
    ("audit", "gateway.testing", "fakes are for tests"),
    ("service", "gateway.server", "the service layer is under every surface"),
    ("service", "gateway.mcp", "the service layer is under every surface"),
    ("service", "gateway.cli", "the service layer is under every surface"),
    ("service", "gateway.testing", "fakes are for tests"),
    ("server", "gateway.mcp", "HTTP and MCP are siblings on the service layer"),
    ("mcp", "gateway.server", "HTTP and MCP are siblings on the service layer"),
    *(
        (surface, rule, why)
        for surface in ("server", "mcp")
        for rule, why in (
            ("gateway.cli", "the CLI is above the surfaces"),
            ("gateway.testing", "fakes are for tests"),
            ("gateway.service._", "a surface uses the service layer's public face"),
            ("gateway.policy._", "a surface uses the policy layer's public face"),
            ("gateway.audit._", "a surface uses the audit trail's public face"),
        )
    ),
)


def _layer_modules(layer: str) -> list[Path]:
    if layer == "core":
        return _core_modules()
    return sorted((PACKAGE / layer).glob("*.py"))


def _layer_violations(rules: tuple[tuple[str, str, str], ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for layer, prefix, _why in rules:
        for path in _layer_modules(layer):
            hits = sorted(
                name
                for name in _imported_modules(path)
                if name == prefix
                or name.startswith(prefix if prefix.endswith("._") else f"{prefix}.")
            )
            if hits:
                found.setdefault(f"{layer}/{path.name}", []).extend(hits)
    return found


def test_every_layer_imports_only_the_layers_its_rules_allow() -> None:
    assert _layer_violations(LAYER_RULES) == {}


def test_every_layer_a_rule_names_has_modules() -> None:
    empty = sorted({layer for layer, _, _ in LAYER_RULES if not _layer_modules(layer)})

    assert empty == []


def test_the_layer_checker_reports_a_sibling_import_and_a_private_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from gateway.server import GatewayApp\n"
        "from gateway.policy._context import current_caller\n"
        "from gateway.policy import caller_context\n",
        encoding="utf-8",
    )
    names = _imported_modules(sample)

    assert sorted(name for name in names if name.startswith("gateway.policy._")) == [
        "gateway.policy._context",
        "gateway.policy._context.current_caller",
    ]
    assert "gateway.server" in names
