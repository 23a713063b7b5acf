"""The policy gate: every served tool has a decision path whose settings match its schema."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pytest

from gateway import Authorization, ToolDefinition, function_tool
from gateway.cli import main as cli_main
from gateway.policy import (
    EmbeddedEngine,
    PolicyAuthorizer,
    caller_context,
    read_policy_data,
)
from gateway.policy._bundle import digest_revision
from gateway.policy._document import state_input
from gateway.policy._gate import (
    GATE_PATH,
    GateError,
    GateProblem,
    Severity,
    check_policy_coverage,
)
from tests.policy.conftest import DECISION, provisioned_opa
from tests.policy.differential_corpus import EXAMPLE_DEFINITIONS, GOOD_ARGUMENTS
from tests.policy.wasm_support import built_bundle, shipped_engine

POLICY_DIR: Final = Path(__file__).resolve().parents[2] / "policies"
STRING: Final = {"type": "string"}
SQL: Final = {"type": "string", "contentMediaType": "application/sql"}
NUMBER: Final = {"type": "number"}


def gate_engine(document: Any = None) -> EmbeddedEngine:
    """The shipped policies compiled with the gate entrypoint, serving ``document`` as data."""
    bundle = built_bundle(provisioned_opa(), str(POLICY_DIR), (DECISION, GATE_PATH))
    if document is not None:
        encoded = json.dumps(document, separators=(",", ":")).encode()
        bundle = dataclasses.replace(
            bundle, data=encoded, revision=digest_revision(bundle.wasm, encoded)
        )
    return EmbeddedEngine(bundle)


def gate(definitions: Sequence[ToolDefinition], document: Any = None) -> list[GateProblem]:
    """The policy gate's problems for ``definitions`` against ``document`` (default: shipped)."""
    with gate_engine(document) as engine:
        return check_policy_coverage(definitions, engine)


def assert_problems(
    definitions: Sequence[ToolDefinition], problems: list[GateProblem], expected: Expected
) -> None:
    """Each problem matches exactly one expected (tool, severity, fragment).

    The problems come per served tool in the order served, then unserved tools by name,
    and each tool's errors before its warnings.
    """
    served = list(dict.fromkeys(d.name for d in definitions))

    def rank(problem: GateProblem) -> tuple[int, str, int]:
        position = served.index(problem.tool) if problem.tool in served else len(served)
        return position, problem.tool, problem.severity != "error"

    assert problems == sorted(problems, key=rank), problems
    unmatched = list(problems)
    for name, severity, fragment in expected:
        found = [
            p
            for p in unmatched
            if (p.tool, p.severity) == (name, severity) and fragment in p.problem
        ]
        assert found, (name, severity, fragment, problems)
        unmatched.remove(found[0])
    assert unmatched == [], unmatched


def tool(
    name: str,
    properties: Mapping[str, Any] | None = None,
    required: Sequence[str] | None = None,
) -> ToolDefinition:
    """A definition; every property is required unless ``required`` says otherwise."""
    props = dict(properties or {})
    wanted = list(props if required is None else required)
    schema = {"type": "object", "properties": props, "required": wanted}
    return ToolDefinition(name, schema)


def data(
    tools: Mapping[str, Any],
    roles: Mapping[str, Any] | None = None,
    resources: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A data document; by default the role ``user`` grants every configured tool."""
    granted = {"user": {"tools": list(tools), "limits": {"amount": 100}}}
    config: dict[str, Any] = {
        "cache_ttl_s": 60,
        "roles": granted if roles is None else dict(roles),
        "tenants": {"acme": {}},
        "resources": {"accounts": {"a-1": "acme"}} if resources is None else dict(resources),
        "tools": dict(tools),
    }
    return {"gateway": {"config": config}}


Expected = list[tuple[str, Severity, str]]

# (definitions, data, expected problems as (tool, severity, fragment of the problem)).
CASES: Final[dict[str, tuple[list[ToolDefinition], dict[str, Any], Expected]]] = {
    "clean": (
        [
            tool("read", {"path": STRING}),
            tool("fetch", {"url": STRING}),
            tool("query", {"q": SQL, "db": STRING}),
            tool("run", {"cmd": STRING, "argv": {"type": "array"}}, ["cmd"]),
            tool("pay", {"amount": NUMBER, "account": STRING}),
            tool("note", {"tenant": STRING, "text": {}}),
        ],
        data(
            {
                "read": {"kind": "filesystem", "path_args": ["path"], "roots": ["/srv/"]},
                "fetch": {"kind": "url", "url_args": ["url"], "hosts": ["a.example"]},
                "query": {"kind": "sql", "sql_args": ["q"], "resource_args": {"db": "accounts"}},
                "run": {"kind": "exec", "command_arg": "cmd", "args_arg": "argv"},
                "pay": {
                    "kind": "payment",
                    "limits": [{"arg": "amount", "limit": "amount", "min": 0.5}],
                    "resource_args": {"account": "accounts"},
                },
                "note": {"kind": "generic", "tenant_args": ["tenant"], "max_length": None},
            }
        ),
        [],
    ),
    "served_tool_without_settings": (
        [tool("ghost")],
        data({}, roles={"user": {"tools": ["ghost"]}}),
        [("ghost", "error", "has no settings")],
    ),
    "served_tool_without_settings_or_role": (
        [tool("ghost")],
        data({}),
        [("ghost", "error", "has no settings"), ("ghost", "error", "no role")],
    ),
    "settings_not_an_object": (
        [tool("add")],
        data({"add": "generic"}),
        [("add", "error", "has no settings")],
    ),
    "unknown_kind": (
        [tool("add")],
        data({"add": {"kind": "GENERIC", "url_args": ["x"]}}),
        [("add", "error", 'kind "GENERIC" is not one of')],
    ),
    "missing_kind": (
        [tool("add")],
        data({"add": {}}),
        [("add", "error", "kind null is not one of")],
    ),
    "unhashable_kind": (
        [tool("add")],
        data({"add": {"kind": ["generic"]}}),
        [("add", "error", "is not one of")],
    ),
    "granted_by_no_role": (
        [tool("add")],
        data({"add": {"kind": "generic"}}, roles={"user": {"tools": ["other"]}, "x": "junk"}),
        [("add", "error", "no role in data.gateway.config.roles grants it")],
    ),
    "settings_for_a_tool_not_served": (
        [tool("add")],
        data({"add": {"kind": "generic"}, "zeta": {"kind": "generic"}, "alpha": {}}),
        [
            ("alpha", "warning", "no served tool has this name"),
            ("zeta", "warning", "no served tool has this name"),
        ],
    ),
    "path_arg_not_in_schema": (
        [tool("read", {"path": STRING})],
        data({"read": {"kind": "filesystem", "path_args": ["file"], "roots": ["/srv/"]}}),
        [("read", "error", 'setting path_args names argument "file", which is not a property')],
    ),
    "url_arg_not_in_schema": (
        [tool("fetch", {"url": STRING})],
        data({"fetch": {"kind": "url", "url_args": ["href"]}}),
        [("fetch", "error", 'setting url_args names argument "href"')],
    ),
    "sql_arg_not_in_schema": (
        [tool("query", {"sql": STRING})],
        data({"query": {"kind": "sql", "sql_args": ["query"]}}),
        [("query", "error", 'setting sql_args names argument "query"')],
    ),
    "command_arg_not_in_schema": (
        [tool("run", {"command": STRING})],
        data({"run": {"kind": "exec", "command_arg": "cmd"}}),
        [("run", "error", 'setting command_arg names argument "cmd"')],
    ),
    "args_arg_not_in_schema": (
        [tool("run", {"command": STRING})],
        data({"run": {"kind": "exec", "command_arg": "command", "args_arg": "args"}}),
        [("run", "error", 'setting args_arg names argument "args"')],
    ),
    "tenant_arg_not_in_schema": (
        [tool("note", {"text": STRING})],
        data({"note": {"kind": "generic", "tenant_args": ["tenant"]}}),
        [("note", "error", 'setting tenant_args names argument "tenant"')],
    ),
    "resource_arg_not_in_schema": (
        [tool("pay", {"amount": NUMBER})],
        data(
            {
                "pay": {
                    "kind": "payment",
                    "limits": [{"arg": "amount", "limit": "amount"}],
                    "resource_args": {"from_account": "accounts"},
                }
            }
        ),
        [("pay", "error", 'setting resource_args names argument "from_account"')],
    ),
    "limit_arg_not_in_schema": (
        [tool("pay", {"amount": NUMBER})],
        data({"pay": {"kind": "payment", "limits": [{"arg": "value", "limit": "amount"}]}}),
        [("pay", "error", 'setting limits names argument "value"')],
    ),
    "argument_not_required": (
        [tool("read", {"path": STRING}, required=[])],
        data({"read": {"kind": "filesystem", "path_args": ["path"], "roots": ["/srv/"]}}),
        [("read", "warning", 'argument "path" (setting path_args) is not required')],
    ),
    "optional_args_arg_is_fine": (
        [tool("run", {"command": STRING, "args": {"type": "array"}}, required=["command"])],
        data({"run": {"kind": "exec", "command_arg": "command", "args_arg": "args"}}),
        [],
    ),
    "argument_of_the_wrong_type": (
        [tool("pay", {"amount": STRING}), tool("read", {"path": {"type": ["integer", "null"]}})],
        data(
            {
                "pay": {"kind": "payment", "limits": [{"arg": "amount", "limit": "amount"}]},
                "read": {"kind": "filesystem", "path_args": ["path"], "roots": ["/srv/"]},
            }
        ),
        [
            ("pay", "error", 'argument "amount", whose schema type (string) is not'),
            ("read", "error", 'argument "path", whose schema type (integer, null) is not string'),
        ],
    ),
    "argument_that_can_never_be_given": (
        [ToolDefinition("read", {"type": "object", "properties": {"path": False}})],
        data({"read": {"kind": "filesystem", "path_args": ["path"], "roots": ["/srv/"]}}),
        [
            ("read", "error", "schema type (none) is not string"),
            ("read", "warning", "is not required"),
        ],
    ),
    "untyped_arguments_are_fine": (
        [
            ToolDefinition(
                "q",
                {
                    "type": "object",
                    "properties": {"sql": {"contentMediaType": "application/sql"}, "db": True},
                },
            )
        ],
        data({"q": {"kind": "sql", "sql_args": ["sql"], "resource_args": {"db": "accounts"}}}),
        [
            ("q", "warning", 'argument "sql" (setting sql_args) is not required'),
            ("q", "warning", 'argument "db" (setting resource_args) is not required'),
        ],
    ),
    "sql_arg_not_marked_as_sql": (
        [tool("query", {"q": STRING})],
        data({"query": {"kind": "sql", "sql_args": ["q"]}}),
        [("query", "error", 'is not marked "contentMediaType": "application/sql"')],
    ),
    "sql_arg_marked_with_another_media_type": (
        [tool("query", {"q": {"type": "string", "contentMediaType": "text/plain"}})],
        data({"query": {"kind": "sql", "sql_args": ["q"]}}),
        [("query", "error", "the gateway gives the policy no sql facts")],
    ),
    "sql_arg_marked_through_a_ref": (
        [
            ToolDefinition(
                "query",
                {
                    "type": "object",
                    "properties": {"q": {"$ref": "#/$defs/sql"}},
                    "required": ["q"],
                    "$defs": {"sql": SQL},
                },
            )
        ],
        data({"query": {"kind": "sql", "sql_args": ["q"]}}),
        [],
    ),
    "integer_limit_argument_is_fine": (
        [tool("pay", {"amount": {"type": "integer"}})],
        data({"pay": {"kind": "payment", "limits": [{"arg": "amount", "limit": "amount"}]}}),
        [],
    ),
    "required_settings_missing": (
        [tool("read"), tool("fetch"), tool("query"), tool("run"), tool("pay")],
        data(
            {
                "read": {"kind": "filesystem", "roots": None},
                "fetch": {"kind": "url", "url_args": None},
                "query": {"kind": "sql", "sql_args": []},
                "run": {"kind": "exec", "command_arg": ""},
                "pay": {"kind": "payment"},
            }
        ),
        [
            ("read", "error", 'kind "filesystem" requires setting path_args'),
            ("read", "error", "setting roots holds no absolute directory"),
            ("fetch", "error", 'kind "url" requires setting url_args'),
            ("query", "error", "setting sql_args is empty"),
            ("run", "error", 'kind "exec" requires setting command_arg'),
            ("pay", "error", 'kind "payment" requires setting limits'),
        ],
    ),
    "malformed_name_settings": (
        [tool("note", {"tenant": STRING}), tool("run", {"command": STRING})],
        data(
            {
                "note": {"kind": "generic", "tenant_args": "tenant"},
                "run": {"kind": "exec", "command_arg": ["command"], "args_arg": 5},
            }
        ),
        [
            ("note", "error", "setting tenant_args is not an array of argument names"),
            ("run", "error", "setting command_arg is not an argument name: every call"),
            ("run", "error", "setting args_arg is not an argument name: the policies ignore"),
        ],
    ),
    "relative_roots": (
        [tool("read", {"path": STRING})],
        data({"read": {"kind": "filesystem", "path_args": ["path"], "roots": ["srv/", 5]}}),
        [("read", "error", "setting roots holds no absolute directory")],
    ),
    "malformed_resource_args": (
        [tool("a", {"db": STRING}), tool("b", {"db": STRING})],
        data(
            {
                "a": {"kind": "generic", "resource_args": ["db"]},
                "b": {"kind": "generic", "resource_args": {"db": "databases"}},
            }
        ),
        [
            ("a", "error", "setting resource_args is not an object"),
            ("b", "error", 'resource kind "databases", which data.gateway.config.resources'),
        ],
    ),
    "malformed_limits": (
        [tool("pay", {"amount": NUMBER}), tool("add", {"n": NUMBER})],
        data(
            {
                "pay": {
                    "kind": "payment",
                    "limits": [{"arg": "amount"}, {"arg": "amount", "limit": "x", "min": None}],
                },
                "add": {"kind": "generic", "limits": {"arg": "n"}},
            }
        ),
        [
            ("pay", "error", "setting limits member 0 is not"),
            ("pay", "error", "setting limits member 1 is not"),
            ("add", "error", "setting limits is not an array"),
        ],
    ),
    "empty_payment_limits": (
        [tool("pay", {"amount": NUMBER})],
        data({"pay": {"kind": "payment", "limits": []}}),
        [("pay", "error", "setting limits is empty")],
    ),
    "limit_defined_by_no_role": (
        [tool("pay", {"amount": NUMBER})],
        data(
            {"pay": {"kind": "payment", "limits": [{"arg": "amount", "limit": "amount"}]}},
            roles={"user": {"tools": ["pay"], "limits": {"amount": "100"}}},
        ),
        [("pay", "error", 'limit "amount" (argument "amount") is defined by no role:')],
    ),
    "limit_defined_only_by_a_role_that_does_not_grant": (
        [tool("pay", {"amount": NUMBER})],
        data(
            {"pay": {"kind": "payment", "limits": [{"arg": "amount", "limit": "amount"}]}},
            roles={"user": {"tools": ["pay"]}, "boss": {"tools": [], "limits": {"amount": 5}}},
        ),
        [("pay", "warning", "is defined by no role that grants the tool")],
    ),
    "setting_ignored_by_the_kind": (
        [tool("add", {"url": STRING, "cmd": STRING})],
        data({"add": {"kind": "generic", "url_args": ["url"], "command_arg": "cmd"}}),
        [
            ("add", "warning", 'setting url_args is ignored for kind "generic"'),
            ("add", "warning", 'setting command_arg is ignored for kind "generic"'),
        ],
    ),
    "all_of_schema": (
        [
            ToolDefinition(
                "read",
                {
                    "type": "object",
                    "allOf": [
                        {"properties": {"path": STRING}, "required": ["path"]},
                        "not-a-schema",
                    ],
                },
            )
        ],
        data({"read": {"kind": "filesystem", "path_args": ["path"], "roots": ["/srv/"]}}),
        [],
    ),
    "no_config_at_all": (
        [tool("add")],
        {"gateway": "nothing"},
        [("add", "error", "has no settings"), ("add", "error", "no role")],
    ),
    "duplicate_definitions_are_checked_once": (
        [tool("add"), tool("add")],
        data({"add": {"kind": "generic"}}),
        [],
    ),
}


@pytest.mark.parametrize(("definitions", "document", "expected"), CASES.values(), ids=CASES)
def test_gate(
    definitions: list[ToolDefinition], document: dict[str, Any], expected: Expected
) -> None:
    assert_problems(definitions, gate(definitions, document), expected)


def test_problems_are_frozen_and_default_to_errors() -> None:
    problem = GateProblem("add", "broken")
    assert problem.severity == "error"
    with pytest.raises(AttributeError):
        problem.tool = "other"  # type: ignore[misc]


def test_the_shipped_data_covers_the_example_tools() -> None:
    assert gate(list(EXAMPLE_DEFINITIONS.values())) == []


# -- what the gate promises, checked on the real policies -----------------------------------


#: input.state for a fresh session (the flow tools that read it; flow.rego).
_FRESH_STATE: Final = json.dumps(
    {
        "version": 1,
        "session": {"calls": 0, "labels": [], "tools": {}, "history": []},
        "counts": {
            scope: {"60": 0, "3600": 0, "86400": 0}
            for scope in ("caller", "caller_tool", "tenant", "tenant_tool")
        },
    },
    sort_keys=True,
    separators=(",", ":"),
).encode()
_READS_STATE: Final = frozenset({"send_email", "pay_vendor"})


async def _allowed(engine: EmbeddedEngine, name: str, roles: list[str]) -> bool:
    authorizer = PolicyAuthorizer(engine)
    arguments = json.dumps(GOOD_ARGUMENTS.get(name, {})).encode()
    state = state_input(_FRESH_STATE) if name in _READS_STATE else contextlib.nullcontext()
    with caller_context(subject="alice", roles=roles, tenant="acme"), state:
        decision = await authorizer.authorize(Authorization(EXAMPLE_DEFINITIONS[name], arguments))
    return decision.allowed


OWNERS: Final = {
    "read_file": ["reader"],
    "write_file": ["writer"],
    "fetch_url": ["reader"],
    "query_db": ["analyst"],
    "pay": ["clerk"],
    "run_command": ["operator"],
    "search": ["reader"],
    "add": ["writer"],
    "read_secret": ["agent"],
    "fetch_page": ["agent"],
    "send_email": ["agent"],
    "pay_vendor": ["agent"],
}


async def test_every_tool_that_passes_the_gate_has_an_allowed_call() -> None:
    engine = shipped_engine()
    assert set(OWNERS) == set(EXAMPLE_DEFINITIONS)
    for name, roles in OWNERS.items():
        assert await _allowed(engine, name, roles), name


# A gate error on a served tool means the policies deny even a well-formed call.
BROKEN: Final[dict[str, tuple[str, str, Any]]] = {
    "path_args_mismatch": ("read_file", "path_args", ["file"]),
    "url_args_mismatch": ("fetch_url", "url_args", ["href"]),
    "sql_args_mismatch": ("query_db", "sql_args", ["sql"]),
    "command_arg_mismatch": ("run_command", "command_arg", "cmd"),
    "tenant_args_mismatch": ("search", "tenant_args", ["tenant_id"]),
    "resource_args_mismatch": ("query_db", "resource_args", {"db": "databases"}),
    "limits_mismatch": ("pay", "limits", [{"arg": "value", "limit": "payment_amount"}]),
    "unknown_kind": ("add", "kind", "math"),
    "no_roots": ("read_file", "roots", []),
}


async def test_an_sql_argument_without_the_marker_fails_the_gate_and_every_call_is_denied() -> None:
    marked = EXAMPLE_DEFINITIONS["query_db"]
    schema = json.loads(marked.input_schema_json)
    del schema["properties"]["query"]["contentMediaType"]
    unmarked = ToolDefinition(marked.name, schema, marked.description)
    definitions = [d for d in EXAMPLE_DEFINITIONS.values() if d.name != "query_db"] + [unmarked]

    problems = gate(definitions)

    assert [(p.tool, p.severity) for p in problems] == [("query_db", "error")]
    arguments = json.dumps(GOOD_ARGUMENTS["query_db"]).encode()
    with caller_context(subject="alice", roles=["analyst"], tenant="acme"):
        decision = await PolicyAuthorizer(shipped_engine()).authorize(
            Authorization(unmarked, arguments)
        )
    assert decision.allowed is False
    assert decision.message == "this tool is not configured correctly"


@pytest.mark.parametrize(("name", "setting", "value"), BROKEN.values(), ids=BROKEN)
async def test_a_gate_error_means_every_call_is_denied(name: str, setting: str, value: Any) -> None:
    broken = read_policy_data(POLICY_DIR)
    broken["gateway"]["config"]["tools"][name][setting] = value
    problems = gate(list(EXAMPLE_DEFINITIONS.values()), broken)
    assert [p.tool for p in problems if p.severity == "error"] == [name]
    assert not await _allowed(shipped_engine(broken), name, OWNERS[name])


# -- a kind added the way policies/README.md says, with no change outside policies/ ------


def open_ticket(queue: str, text: str) -> str:
    """A tool of a kind the shipped library does not have: it files a ticket in a queue."""
    return f"{queue}: {text}"


TICKET_TOOLS: Final = [function_tool(open_ticket)]
EXAMPLES: Final = POLICY_DIR.parent / "examples"

TICKETS_REGO: Final = """\
# METADATA
# title: Ticket queues
# description: For tools of kind "ticket", every queue argument must be a listed queue.
package gateway.authz.tickets

import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.string_list
import data.gateway.authz.lib.tool

module := "tickets"

applies if tool.kind == "ticket"

queue_args := string_list(setting("queue_args", []))

queues := {q | some q in string_list(setting("queues", []))}

gate_settings := {"queue_args": {"names": "list", "types": ["string"], "required": true}}

deny contains denial(module, "the queue is not allowed", "queue not listed") if {
\tsome name in queue_args
\tnot arguments[name] in queues
}
"""

TICKETS_TEST_REGO: Final = """\
package gateway.authz.tickets_test

import data.gateway.authz.fixtures_test as fx

test_ticket_allowed if {
\tfx.allowed(fx.as_role("reader", "open_ticket", {"queue": "support", "text": "hi"}))
}

test_ticket_other_queue_denied if {
\td := fx.as_role("reader", "open_ticket", {"queue": "payroll", "text": "hi"})
\tfx.has_message(d, "the queue is not allowed")
}
"""


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def add_ticket_kind(root: Path, queue_args: list[str]) -> None:
    """policies/README.md, "Adding a tool" step 6 and steps 2-4, done on a copy."""
    authz = root / "gateway" / "authz"
    (authz / "tickets.rego").write_text(TICKETS_REGO, encoding="utf-8")
    (authz / "tickets_test.rego").write_text(TICKETS_TEST_REGO, encoding="utf-8")
    _edit(
        authz / "main.rego",
        "} else := set()\n\ndenials :=",
        '} else := data.gateway.authz.tickets.deny if {\n\ttool.kind == "ticket"\n'
        "} else := set()\n\ndenials :=",
    )
    _edit(authz / "main_test.rego", ") | exec.deny\n", ") | exec.deny) | tickets.deny\n")
    _edit(authz / "main_test.rego", "all_argument_denials := ", "all_argument_denials := (")
    _edit(
        authz / "main_test.rego",
        "import data.gateway.authz.tenancy\n",
        "import data.gateway.authz.tenancy\nimport data.gateway.authz.tickets\n",
    )
    _edit(authz / "rbac.rego", '"generic"}', '"generic", "ticket"}')
    _edit(
        authz / "gate.rego",
        '\t"tenancy": {',
        '\t"tickets": {"kind": "ticket", "settings": data.gateway.authz.tickets.gate_settings, '
        '"problems": set()},\n\t"tenancy": {',
    )
    document = json.loads((root / "data.json").read_bytes())
    config = document["gateway"]["config"]
    config["tools"]["open_ticket"] = {
        "kind": "ticket",
        "queue_args": queue_args,
        "queues": ["support"],
    }
    config["roles"]["reader"]["tools"].append("open_ticket")
    (root / "data.json").write_text(json.dumps(document, indent=2), encoding="utf-8")


@pytest.fixture
def ticket_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example tools and open_ticket; the gate compiles with the real opa."""
    monkeypatch.setattr(sys, "path", [*sys.path, str(EXAMPLES)])
    monkeypatch.setenv("OPA_BIN", provisioned_opa())
    path = tmp_path / "gateway.toml"
    path.write_text(
        '[engine]\nkind = "opa"\nurl = "http://127.0.0.1:1"\n\n[audit]\nenabled = false\n\n'
        f'[[auth.api_keys]]\nsha256 = "{"0" * 64}"\ncontext = {{ subject = "alice" }}\n\n'
        '[tools]\nmodules = ["example_tools:TOOLS", "tests.policy.test_gate:TICKET_TOOLS"]\n',
        encoding="utf-8",
    )
    return path


def _copy_policies(tmp_path: Path) -> Path:
    root = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, root, ignore=shutil.ignore_patterns("check.sh", "README.md"))
    return root


def test_a_kind_added_as_the_policy_readme_says_passes_the_gate_with_no_change_outside_policies(
    tmp_path: Path, ticket_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy_policies(tmp_path)
    add_ticket_kind(root, ["queue"])
    tested = subprocess.run(
        [provisioned_opa(), "test", str(root)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr

    status = cli_main(["gate", "--config", str(ticket_config), "--policies", str(root)])

    out, err = capsys.readouterr()
    assert status == 0, out + err
    # The examples serve neither write_file, run_command nor the four flow tools: those
    # six warnings only.
    assert [line for line in out.splitlines() if "open_ticket" in line or "error" in line] == [
        "7 tools checked: 0 error(s), 6 warning(s)"
    ]


def test_the_gate_checks_an_added_kind_by_the_settings_its_module_declares(
    tmp_path: Path, ticket_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy_policies(tmp_path)
    add_ticket_kind(root, ["queue_name"])

    status = cli_main(["gate", "--config", str(ticket_config), "--policies", str(root)])

    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert [line for line in out.splitlines() if "open_ticket" in line or "error" in line] == [
        'error: open_ticket: setting queue_args names argument "queue_name", which is not a '
        "property of the input schema: every call is denied",
        "7 tools checked: 1 error(s), 6 warning(s)",
    ]


# -- the gate fails closed on a policy that gives it no usable answer --------------------

MALFORMED_ANSWERS: Final = {
    "not_a_set": '"nothing is wrong"',
    "a_member_not_an_object": '{"error"}',
    "a_member_without_severity": '{{"tool": "add", "problem": "x"}}',
    "an_unknown_severity": '{{"tool": "add", "severity": "fatal", "problem": "x"}}',
    "an_extra_member": '{{"tool": "add", "severity": "error", "problem": "x", "more": 1}}',
    "a_tool_not_a_string": '{{"tool": 1, "severity": "error", "problem": "x"}}',
}


@pytest.mark.parametrize("answer", MALFORMED_ANSWERS.values(), ids=MALFORMED_ANSWERS)
def test_a_malformed_gate_answer_is_a_gate_error_not_a_pass(tmp_path: Path, answer: str) -> None:
    (tmp_path / "gate.rego").write_text(
        f"package gateway.authz.gate\n\nproblems := {answer}\n", encoding="utf-8"
    )
    engine = EmbeddedEngine.from_directory(
        tmp_path, entrypoints=(GATE_PATH,), opa_binary=provisioned_opa()
    )
    with engine, pytest.raises(GateError):
        check_policy_coverage([tool("add")], engine)


def test_an_undefined_gate_answer_is_a_gate_error(tmp_path: Path) -> None:
    (tmp_path / "gate.rego").write_text(
        'package gateway.authz.gate\n\nproblems := [] if input.never == "set"\n',
        encoding="utf-8",
    )
    engine = EmbeddedEngine.from_directory(
        tmp_path, entrypoints=(GATE_PATH,), opa_binary=provisioned_opa()
    )
    with engine, pytest.raises(GateError, match="undefined"):
        check_policy_coverage([tool("add")], engine)


def test_a_bundle_without_the_gate_entrypoint_is_a_gate_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "main.rego").write_text(
        "package gateway.authz\n\ndecision := false\n", encoding="utf-8"
    )
    engine = EmbeddedEngine.from_directory(tmp_path, opa_binary=provisioned_opa())
    with engine, pytest.raises(GateError, match=GATE_PATH):
        check_policy_coverage([tool("add")], engine)


def test_the_committed_bundle_answers_the_gate() -> None:
    engine = EmbeddedEngine.from_bundle(POLICY_DIR.parent / "bundles" / "policies.tar.gz")
    with engine:
        assert GATE_PATH in engine.entrypoints
        assert check_policy_coverage(list(EXAMPLE_DEFINITIONS.values()), engine) == []
