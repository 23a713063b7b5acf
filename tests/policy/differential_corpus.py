"""A deterministic corpus of policy inputs for the shipped policies, and the example tools.

Every case is what the gateway itself would hand a policy engine: a :class:`ToolDefinition`,
the argument bytes and the caller context. The corpus covers allowed calls, every denial of
every module, evasion attempts (traversal, percent-encoding, look-alikes, URL tricks, SQL
comments and stacked statements, shell metacharacters, limit edges, cross-tenant access),
malformed caller contexts and argument shapes, numbers at the edge of binary64, and seeded
fuzz. It is rebuilt identically on every run (fixed seeds, no hashing of sets).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from gateway import ToolDefinition, _json
from gateway.policy import CallerContext

# -- the example tools: definitions that match policies/data.json ---------------------------

_STRING: Final = {"type": "string"}
#: A string the gateway parses as SQL for the policy (policies/README.md, "Argument facts").
_SQL: Final = {"type": "string", "contentMediaType": "application/sql"}


def _schema(properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(required),
        "additionalProperties": False,
    }


#: One definition for every tool configured in ``policies/data.json``; every argument a
#: setting names is a required property of the schema.
EXAMPLE_DEFINITIONS: Final[Mapping[str, ToolDefinition]] = {
    definition.name: definition
    for definition in (
        ToolDefinition(
            "read_file", _schema({"path": _STRING}, ["path"]), "Read a file of the tenant."
        ),
        ToolDefinition(
            "write_file",
            _schema({"path": _STRING, "content": _STRING}, ["path", "content"]),
            "Write a file of the tenant.",
        ),
        ToolDefinition("fetch_url", _schema({"url": _STRING}, ["url"]), "Fetch an HTTPS URL."),
        ToolDefinition(
            "query_db",
            _schema({"database": _STRING, "query": _SQL}, ["database", "query"]),
            "Run a SQL query.",
        ),
        ToolDefinition(
            "pay",
            _schema(
                {"from_account": _STRING, "amount": {"type": "number"}, "memo": _STRING},
                ["from_account", "amount"],
            ),
            "Pay from an account of the tenant.",
        ),
        ToolDefinition(
            "run_command",
            _schema({"command": _STRING, "args": {"type": "array", "items": _STRING}}, ["command"]),
            "Run an allow-listed command.",
        ),
        ToolDefinition(
            "search",
            _schema({"tenant": _STRING, "query": _STRING}, ["tenant", "query"]),
            "Search the tenant's documents.",
        ),
        ToolDefinition(
            "add",
            _schema({"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"]),
            "Add two numbers.",
        ),
        # The flow tools (labels and quotas; flow.rego): no arguments.
        ToolDefinition("read_secret", _schema({}, []), "Read a secret."),
        ToolDefinition("fetch_page", _schema({}, []), "Fetch a web page."),
        ToolDefinition("send_email", _schema({}, []), "Send an email."),
        ToolDefinition("pay_vendor", _schema({}, []), "Pay a vendor."),
    )
}

#: Served tools that ``policies/data.json`` does not configure (always denied).
UNCONFIGURED_DEFINITIONS: Final[Mapping[str, ToolDefinition]] = {
    definition.name: definition
    for definition in (
        ToolDefinition("delete_everything", {"type": "object"}),
        ToolDefinition("Read_File", _schema({"path": _STRING}, ["path"])),
        ToolDefinition("add-", {"type": "object"}, "n\u00e4me-ish \u202e description"),
    )
}

_ALL_DEFINITIONS: Final = {**EXAMPLE_DEFINITIONS, **UNCONFIGURED_DEFINITIONS}


# -- cases ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    """One policy input as the gateway builds it.

    Attributes:
        label: where the case comes from (for failure messages).
        definition: the tool's definition (``input.tool``).
        arguments: the admitted argument bytes (``input.arguments``), numbers exact.
        context: the caller context (``input.context``).
    """

    label: str
    definition: ToolDefinition
    arguments: bytes
    context: CallerContext


def encode(value: Any) -> bytes:
    """Arguments as JSON bytes; ``Decimal`` and ``int`` keep their exact text."""
    return _json.canonical(value)


def context(
    roles: Any = ("reader",),
    tenant: Any = "acme",
    subject: Any = "alice",
    **extra: Any,
) -> dict[str, Any]:
    """A caller context; ``tenant=None`` leaves the tenant out, ``roles=None`` the roles."""
    values: dict[str, Any] = {"subject": subject, "session": "s-1", "request_id": "r-1"}
    if roles is not None:
        values["roles"] = list(roles) if isinstance(roles, tuple) else roles
    if tenant is not None:
        values["tenant"] = tenant
    values.update(extra)
    return values


class _Builder:
    def __init__(self) -> None:
        self.cases: list[Case] = []

    def add(self, label: str, tool: str, arguments: Any, ctx: Mapping[str, Any]) -> None:
        definition = _ALL_DEFINITIONS.get(tool) or ToolDefinition(tool, {"type": "object"})
        raw = arguments if isinstance(arguments, bytes) else encode(arguments)
        self.cases.append(Case(label, definition, raw, CallerContext(dict(ctx))))


# -- hand-written groups --------------------------------------------------------------------

TOOL_NAMES: Final = (*EXAMPLE_DEFINITIONS, *UNCONFIGURED_DEFINITIONS, "search_v2")
ROLE_SETS: Final[tuple[tuple[str, ...], ...]] = (
    ("reader",),
    ("writer",),
    ("analyst",),
    ("dba",),
    ("clerk",),
    ("treasurer",),
    ("operator",),
    ("agent",),
    (),
    ("clerk", "treasurer"),
    ("reader", "writer", "operator"),
    ("ghost",),
    ("Reader",),
    ("reader ",),
)
TENANTS: Final = ("acme", "globex", None)

# Typical well-formed arguments per tool (allowed for the right role and tenant "acme").
GOOD_ARGUMENTS: Final[Mapping[str, Mapping[str, Any]]] = {
    "read_file": {"path": "/srv/tenants/acme/report.txt"},
    "write_file": {"path": "/srv/tenants/acme/out.txt", "content": "x"},
    "fetch_url": {"url": "https://api.example.com/v1/items?q=1"},
    "query_db": {"database": "acme_sales", "query": "SELECT id FROM orders"},
    "pay": {"from_account": "acct-acme-001", "amount": 50},
    "run_command": {"command": "git", "args": ["log", "-n", "20"]},
    "search": {"tenant": "acme", "query": "q3 results"},
    "add": {"a": 1, "b": 2},
}


def _caller_contexts() -> Iterator[tuple[str, dict[str, Any]]]:
    yield "empty", {}
    yield "no-subject", {"roles": ["reader"], "tenant": "acme"}
    for subject in (
        "",
        " ",
        "\t\n",
        "\u00a0",
        "\u2003",
        "\u3000",
        "\u0085",
        "\u180e",
        "\u200b",
        "\ufeff",
        "\u001c",
        " \u00a0bob\u2003 ",
        "b\u00f6b",
        5,
        None,
        True,
        ["alice"],
        {"id": "alice"},
    ):
        yield f"subject={subject!r}", context(subject=subject)
    for roles in (
        "reader",
        ["reader", 1],
        [None],
        [["reader"]],
        {"reader": True},
        [],
        ["READER"],
        ["r\u00e9ader"],
        ["reader", "reader"],
        7,
        True,
    ):
        yield f"roles={roles!r}", context(roles=roles)
    yield "roles=null", {"subject": "alice", "roles": None, "tenant": "acme"}
    yield "roles-absent", context(roles=None)
    for tenant in (
        "ACME",
        "Acme",
        " acme",
        "acme ",
        "acme\n",
        "",
        "unknown",
        "acme-evil",
        "ac*",
        "*",
        ".*",
        "\u0430cme",
        "acme\u200b",
        3,
        0,
        False,
        ["acme"],
        {"id": "acme"},
        "a" * 64,
        "a" * 63,
        "-acme",
        "_acme",
    ):
        yield f"tenant={tenant!r}", context(tenant=tenant)
    yield "tenant=null", {"subject": "alice", "roles": ["reader"], "tenant": None}
    yield "extra-fields", context(admin=True, groups=["root"], level=3)


def _shape_cases(b: _Builder) -> None:
    for label, ctx in _caller_contexts():
        for tool in ("add", "read_file", "search", "delete_everything"):
            b.add(f"caller {label}", tool, GOOD_ARGUMENTS.get(tool, {}), ctx)
    for raw in (
        b"[]",
        b"null",
        b"5",
        b'"x"',
        b"true",
        b"{}",
        b"[{}]",
        b'{"a":{"b":{"c":[1,2,{"d":null}]}}}',
        b'{"":""}',
        b'{"path":"/srv/tenants/acme/x","path ":"/etc/passwd"}',
    ):
        for tool in ("add", "read_file", "run_command", "delete_everything"):
            b.add(f"shape {raw!r}", tool, raw, context(("reader", "operator")))
    deep: Any = "/srv/tenants/acme/x"
    for _ in range(60):
        deep = [deep]
    for tool in ("read_file", "run_command", "pay", "search"):
        b.add("shape deep", tool, {"path": deep, "command": deep, "tenant": deep}, context())
    wrong_types: tuple[Any, ...] = (None, 0, 1.5, True, [], {}, ["x"], {"x": "y"}, "")
    for tool, good in GOOD_ARGUMENTS.items():
        for name in good:
            for value in wrong_types:
                args = {**good, name: value}
                b.add(f"type {tool}.{name}={value!r}", tool, args, _owner_context(tool))
            missing = {k: v for k, v in good.items() if k != name}
            b.add(f"missing {tool}.{name}", tool, missing, _owner_context(tool))
        b.add(f"extra {tool}", tool, {**good, "zzz": "/etc/passwd"}, _owner_context(tool))


_OWNER_ROLES: Final[Mapping[str, tuple[str, ...]]] = {
    "read_file": ("reader",),
    "write_file": ("writer",),
    "fetch_url": ("reader",),
    "query_db": ("analyst",),
    "pay": ("treasurer",),
    "run_command": ("operator",),
    "search": ("reader",),
    "add": ("writer",),
}


def _owner_context(tool: str, tenant: Any = "acme") -> dict[str, Any]:
    return context(roles=_OWNER_ROLES.get(tool, ("reader",)), tenant=tenant)


def _rbac_cases(b: _Builder) -> None:
    for roles in ROLE_SETS:
        for tool in TOOL_NAMES:
            for tenant in TENANTS:
                args = GOOD_ARGUMENTS.get(tool, {})
                b.add(f"rbac {roles} {tool} {tenant}", tool, args, context(roles, tenant))
                if tenant == "acme":
                    b.add(f"rbac-empty {roles} {tool}", tool, {}, context(roles, tenant))


PATHS: Final[tuple[Any, ...]] = (
    "/srv/tenants/acme/x",
    "/srv/tenants/acme/sub/dir/file.txt",
    "/srv/tenants/acme",
    "/srv/tenants/acme/",
    "/srv/shared/a",
    "/srv/shared",
    "/srv/tenants/globex/x",
    "/srv/tenants/acme/../globex/x",
    "/srv/tenants/acme/./x",
    "/srv/tenants/acme/x/..",
    "/srv/tenants/acme/...",
    "/srv/tenants/acme/..x",
    "/srv/tenants/acme//x",
    "//srv/tenants/acme/x",
    "srv/tenants/acme/x",
    "./srv",
    "",
    "/",
    "~/x",
    "~root/x",
    "file:///srv/tenants/acme/x",
    "/srv/tenants/acme/%2e%2e/globex",
    "/srv/tenants/acme/%252e%252e/x",
    "/srv/tenants/acme/%c0%ae%c0%ae/x",
    "/srv/tenants/acme%2fx",
    "/srv/tenants/acme/..\\x",
    "\\srv\\tenants\\acme\\x",
    "/srv/tenants/acme/x\x00.txt",
    "/srv/tenants/acme/x\n",
    "/srv/tenants/acme/x\t",
    "/srv/tenants/acme/x\x7f",
    "/srv/tenants/acme/\uff0e\uff0e/globex",
    "/srv/tenants/acme/..\uff0fglobex",
    "/srv/tenants/acme/..\u2215globex",
    "/srv/tenants/acme/..\u2044globex",
    "/srv/tenants/acme/\u2024\u2024/x",
    "/srv/tenants/acme/\u2025/x",
    "/srv/tenants/acme/\u3002\u3002/x",
    "/srv/tenants/acme/\uff3cx",
    "/srv/tenants/acme/\u2216x",
    "/srv/tenants/acme/\u200bx",
    "/srv/tenants/acme/\u202ex",
    "/srv/tenants/acme/\ufeffx",
    "/srv/tenants/acme/\u00adx",
    "/srv/tenants/acme/r\u00e9sum\u00e9.txt",
    "/srv/tenants/acme/\u0130nsert",
    "/srv/tenants/acme/\U0001f600",
    "/srv/tenants/\u0430cme/x",
    "/srv/tenants/acme-evil/x",
    "/srv/tenants/acmex",
    "/srv/tenants/ACME/x",
    "/srv/tenants/x",
    "/etc/passwd",
    "/proc/self/environ",
    "/srv/tenants/acme/" + "a" * 4078,
    "/srv/tenants/acme/" + "a" * 4079,
    "/srv/tenants/acme/" + "a" * 5000,
    "/srv/tenants/acme/ x",
    "/srv/tenants/acme/x;rm -rf /",
    "/srv/tenants/acme/$HOME",
    "/srv/tenants/acme/*",
    5,
    None,
    ["/srv/shared/a"],
    {"path": "/srv/shared/a"},
)

URLS: Final[tuple[Any, ...]] = (
    "https://api.example.com/v1",
    "https://api.example.com",
    "https://api.example.com/",
    "https://API.EXAMPLE.COM/v1",
    "HTTPS://api.example.com:8443/",
    "https://api.example.com:443/x?y=1#z",
    "https://docs.example.org/",
    "https://v2.docs.example.org/guide",
    "https://a.b.docs.example.org/",
    "https://xdocs.example.org/",
    "https://docs.example.org.evil.com/",
    "https://example.org/",
    "http://api.example.com/",
    "ftp://api.example.com/",
    "file:///etc/passwd",
    "javascript:alert(1)",
    "https://api.example.com@evil.com/",
    "https://user:pass@api.example.com/",
    "https://evil.com#@api.example.com",
    "https://evil.com?@api.example.com",
    "https://a@b@c/",
    "https://[::1]/",
    "https://[::ffff:127.0.0.1]/",
    "https://::1/",
    "https://127.0.0.1/",
    "https://127.1/",
    "https://2130706433/",
    "https://0x7f000001/",
    "https://0x7f.0.0.1/",
    "https://0177.0.0.1/",
    "https://1e3/",
    "https://api.example.com:0443/",
    "https://api.example.com:/",
    "https://api.example.com:443x/",
    "https://api.example.com:443:443/",
    "https://api.example.com:99999999999999999999/",
    "https://api.example.com:8443/",
    "https://api.example.com:80/",
    "https://api.example.com./",
    "https://api_x.example.com/",
    "https://-api.example.com/",
    "https://api..example.com/",
    "https:///x",
    "https://",
    "https:api.example.com",
    "//api.example.com/",
    "/v1/items",
    "api.example.com",
    "https://api.example.com\\@evil.com",
    "https://api.example.com/\\evil",
    "https://\u0430pi.example.com/",
    "https://api.example.com/\u00e9",
    "https://api.example.com/ x",
    "https://api.example.com/\tx",
    "https://api.example.com/\x00",
    "https://api.example.com%2f@evil.com/",
    "https://xn--pi-8kc.example.com/",
    "https://api.example.com/" + "a" * 2024,
    "https://api.example.com/" + "a" * 2025,
    "https://api.example.com/" + "a" * 3000,
    "HtTpS://Docs.Example.Org:443/",
    "",
    1,
    None,
    ["https://api.example.com/"],
)

SQLS: Final[tuple[Any, ...]] = (
    "select 1",
    "SELECT id FROM orders",
    "select 1;",
    "  SeLeCt 1  ",
    "\tselect\n1\r",
    "with t as (select 1) select * from t",
    "select updated_at, sleep_minutes from t",
    "select 1; drop table t",
    "select 1;;",
    "select ';'",
    "with d as (delete from t returning *) select 1",
    "insert into t values (1)",
    "update t set a=1",
    "delete from t",
    "merge into t using s on true when matched then delete",
    "upsert into t values (1)",
    "select * into x from t",
    "select * from t for update",
    "select 1 -- x",
    "select 1 /* */",
    "select 1 */",
    "select 1 # x",
    "del/**/ete from t",
    "select pg_sleep(1)",
    "select PG_SLEEP (1)",
    "select pg_sleep\t(1)",
    # Quoting, escapes, qualification and nesting that a lexical check misses.
    "select \"pg_read_file\"('/etc/passwd')",
    'select pg_catalog."pg_sleep"(1)',
    'select U&"pg\\005fsleep"(1)',
    "select `pg_sleep`(1)",
    "select pg_sleep_for('1s')",
    "select pg_sleep_until('tomorrow')",
    "select lo_from_bytea(0, 'x')",
    "select lo_put(1, 0, 'x')",
    "select * from t for share",
    "select * from t for key share",
    "select * from t for no key update",
    "select id from t where id in (select pg_sleep(1))",
    "with x as (select lo_put(1, 0, 'x')) select * from x",
    "select count(*) over (partition by pg_sleep(1)) from t",
    "select * from t tablesample system_time(10)",
    "select 1 operator(myschema.+) 2",
    "select 'pg_sleep(1)', count(*) from t",
    "select lower(name) from t where name like 'a%'",
    "select 'a\\' || ' , pg_sleep(1) --'",
    "copy (select 1) to program 'id'",
    "explain analyze delete from t",
    "do $$ begin perform 1; end $$",
    "select xmlparse(document '<a/>')",
    "insert into t values (pg_sleep(1))",
    "select x.pg_sleep(1)",
    "select dblink('x')",
    "select set_config('a','b',false)",
    "select sleep(1)",
    "select sleep_x from t",
    "drop table t",
    "truncate t",
    "create table t (a int)",
    "alter table t add b int",
    "grant all on t to x",
    "revoke all on t from x",
    "copy t to '/tmp/x'",
    "call p()",
    "execute p",
    "lock table t",
    "pragma x",
    "attach database 'x' as y",
    "select 1 into outfile '/tmp/x'",
    "set role x",
    "show tables",
    "explain select 1",
    "select 'drop'",
    'select "delete" from t',
    "select 'caf\u00e9'",
    "\u0130NSERT into t values (1)",
    "select 1\u037e drop table t",
    "select 1\uff1b drop table t",
    "SELECT \u212aEY from t",
    "select \u017felect",
    "\u00a0select 1\u00a0",
    "select 1\x00",
    "select 1\x0b",
    "select 1\x0c",
    "",
    "   ",
    ";",
    "select 1" + " " * 9993,
    "select 1" + " " * 9992,
    "select 1" + " " * 10001,
    5,
    None,
    ["select 1"],
)

COMMANDS: Final[tuple[tuple[Any, Any], ...]] = (
    ("ls", []),
    ("ls", None),
    ("ls", ["-la"]),
    ("ls", ["-l", "-a"]),
    ("ls", ["-l", "-a", "-la"]),
    ("ls", ["-LA"]),
    ("git", ["status"]),
    ("git", ["log", "-n", "20"]),
    ("git", ["log", "-n", "1234"]),
    ("git", ["log", "--oneline", "--stat", "-n", "5"]),
    ("git", ["log", "007"]),
    ("git", ["log", "12a"]),
    ("git", ["--exec=sh"]),
    ("git", ["-c", "core.pager=sh"]),
    ("uptime", []),
    ("uptime", ["-p"]),
    ("rm", ["-rf", "/"]),
    ("sh", ["-c", "id"]),
    ("ls; id", []),
    ("ls|id", []),
    ("ls&&id", []),
    ("$(id)", []),
    ("`id`", []),
    ("/bin/ls", []),
    ("./ls", []),
    ("ls ", []),
    (" ls", []),
    ("ls\n", []),
    ("LS", []),
    ("l\u0455", []),
    ("-ls", []),
    (".ls", []),
    ("ls.", []),
    ("", []),
    (None, []),
    (5, []),
    (["ls"], []),
    ("ls", ["$(id)"]),
    ("ls", ["`id`"]),
    ("ls", ["a b"]),
    ("ls", ["-l\n"]),
    ("ls", ["*"]),
    ("ls", ["~"]),
    ("ls", [">x"]),
    ("ls", ["'-l'"]),
    ("ls", ["\u2013la"]),
    ("ls", [""]),
    ("ls", [1]),
    ("ls", [None]),
    ("ls", [["-l"]]),
    ("ls", "-la"),
    ("ls", {"0": "-l"}),
    ("ls", 5),
    ("ls", ["-l"] * 3),
    ("git", ["log"] * 5),
    ("git", ["log"] * 17),
)

AMOUNTS: Final[tuple[Any, ...]] = (
    0,
    1,
    50,
    100,
    101,
    Decimal("100.0"),
    Decimal("100.5"),
    Decimal("99.75"),
    Decimal("1E2"),
    Decimal("1e+2"),
    Decimal("0.5"),
    Decimal("0.0078125"),
    Decimal("-0.0"),
    Decimal("-0.5"),
    -5,
    10000,
    10001,
    Decimal("10000.0"),
    Decimal("10000.5"),
    Decimal("9999.9990234375"),
    2**53,
    -(2**53),
    # Numbers binary64 cannot hold: the embedded engine must refuse, never round.
    Decimal("0.01"),
    Decimal("19.99"),
    Decimal("100.01"),
    Decimal("1.5e-7"),
    Decimal("1e300"),
    Decimal("-1.7976931348623157e308"),
    Decimal("10000.000000000000000001"),
    2**53 + 1,
    12345678901234567890,
    "50",
    "",
    True,
    False,
    None,
    [50],
    {"value": 50},
)
ACCOUNTS: Final[tuple[Any, ...]] = (
    "acct-acme-001",
    "acct-acme-002",
    "acct-globex-001",
    "ACCT-ACME-001",
    "acct-acme-001 ",
    "nope",
    "",
    5,
    None,
    ["acct-acme-001"],
)
DATABASES: Final[tuple[Any, ...]] = ("acme_sales", "globex_hr", "x", "", None, 5, ["acme_sales"])
SEARCH_TENANTS: Final[tuple[Any, ...]] = (
    "acme",
    "globex",
    "ACME",
    " acme",
    "acme\u200b",
    "*",
    "",
    3,
    None,
    True,
    ["acme"],
)


def _path_cases(b: _Builder, tenant: str | None) -> None:
    for path in PATHS:
        args = {"path": path, "content": "x"}
        for tool, role in (("read_file", "reader"), ("write_file", "writer")):
            b.add(f"path {path!r}", tool, args, context((role,), tenant))
        if tenant == "acme":  # a role that does not grant the tool: rbac answers first
            b.add(f"path-rbac {path!r}", "write_file", args, context(("reader",), tenant))


def _url_cases(b: _Builder, tenant: str | None) -> None:
    for url in URLS:
        b.add(f"url {url!r}", "fetch_url", {"url": url}, context(("reader",), tenant))


def _sql_cases(b: _Builder, tenant: str | None) -> None:
    for query in SQLS:
        for roles in (("analyst",), ("dba",)):
            for database in DATABASES[:3] if tenant == "acme" else DATABASES[:1]:
                args = {"database": database, "query": query}
                b.add(f"sql {query!r} {database}", "query_db", args, context(roles, tenant))
    for database in DATABASES:
        args = {"database": database, "query": "select 1"}
        b.add(f"db {database!r}", "query_db", args, context(("analyst",), tenant))


def _exec_cases(b: _Builder, tenant: str | None) -> None:
    for command, argv in COMMANDS:
        args: dict[str, Any] = {} if command is None else {"command": command}
        if argv is not None:
            args["args"] = argv
        b.add(f"exec {command!r} {argv!r}", "run_command", args, context(("operator",), tenant))


def _limit_cases(b: _Builder, tenant: str | None) -> None:
    payers: tuple[tuple[str, ...], ...] = (
        ("clerk",),
        ("treasurer",),
        ("clerk", "treasurer"),
        ("reader",),
    )
    for amount in AMOUNTS:
        for roles in payers:
            args = {"from_account": "acct-acme-001", "amount": amount}
            b.add(f"pay {amount!r}", "pay", args, context(roles, tenant))
    for account in ACCOUNTS:
        for amount in (5, 500, Decimal("0.5")):
            for roles in payers[:2]:
                args = {"from_account": account, "amount": amount}
                b.add(f"pay-account {account!r}", "pay", args, context(roles, tenant))
    for a, c in ((1, 2), (Decimal("1.5"), 2), (Decimal("0.1"), 0), (2**60, 1), ("1", 2)):
        b.add(f"add {a!r}", "add", {"a": a, "b": c}, context(("writer",), tenant))


def _tenancy_cases(b: _Builder, tenant: str | None) -> None:
    for value in SEARCH_TENANTS:
        args = {"tenant": value, "query": "x"}
        b.add(f"search {value!r}", "search", args, context(("reader",), tenant))


def _argument_cases(b: _Builder) -> None:
    for tenant in TENANTS:
        for group in (_path_cases, _url_cases, _sql_cases, _exec_cases, _limit_cases):
            group(b, tenant)
        _tenancy_cases(b, tenant)


# -- seeded fuzz ----------------------------------------------------------------------------

_ALPHABET: Final[tuple[str, ...]] = (
    *"/.\\%@:;#-*?$`|&<>()[]{}'\" \t\nabcAZ09_=+,~!",
    "\x00",
    "\x7f",
    "\u00e9",
    "\u00a0",
    "\u0130",
    "\u0131",
    "\u212a",
    "\u017f",
    "\u037e",
    "\u200b",
    "\u202e",
    "\u2028",
    "\u3000",
    "\uff0f",
    "\uff0e",
    "\u2215",
    "\u2044",
    "\U0001f600",
    "..",
    "//",
    "%2e",
    "select ",
    "delete ",
    "into ",
    "drop ",
    "pg_sleep(",
    "--",
    "/*",
    "https://",
    "api.example.com",
    "docs.example.org",
    ":443",
    ":8443",
    "@",
    "/srv/tenants/acme/",
    "/srv/shared/",
)


class _Fuzzer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not a secret

    def text(self, prefix: str = "", longest: int = 12) -> str:
        rng = self.rng
        return prefix + "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, longest)))

    def exact_number(self) -> Any:
        rng = self.rng
        kind = rng.randrange(4)
        if kind == 0:
            return rng.randint(-5, 20_000)
        if kind == 1:  # a binary fraction: exact in binary64
            return Decimal(rng.randint(-40, 80_000)) / Decimal(2 ** rng.randint(0, 4))
        if kind == 2:  # a short decimal: usually not exact in binary64
            return Decimal(f"{rng.randint(0, 20_000)}.{rng.randint(0, 99):02d}")
        return rng.choice((0, 100, 10_000, Decimal("100.0"), Decimal("1e4"), 2**53, 2**53 + 1))

    def value(self, depth: int = 0) -> Any:
        rng = self.rng
        kind = rng.randrange(9 if depth < 3 else 6)
        if kind == 0:
            return None
        if kind == 1:
            return rng.choice((True, False))
        if kind == 2:
            return self.exact_number()
        if kind in (3, 4, 5):
            return self.text()
        if kind in (6, 7):
            return [self.value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {self.text(longest=3): self.value(depth + 1) for _ in range(rng.randint(0, 3))}

    def context(self) -> dict[str, Any]:
        rng = self.rng
        if rng.random() < 0.85:
            roles = rng.sample(
                ("reader", "writer", "analyst", "dba", "clerk", "treasurer", "operator", "x"),
                rng.randint(0, 3),
            )
            return context(roles, rng.choice(("acme", "acme", "globex", None)))
        return {
            key: self.value()
            for key in rng.sample(("subject", "roles", "tenant", "session"), rng.randint(0, 4))
        }


def _fuzz_cases(b: _Builder, count: int, seed: int) -> None:
    f = _Fuzzer(seed)
    rng = f.rng
    for i in range(count):
        ctx = f.context() if i % 10 == 9 else None
        kind = i % 8
        if kind == 0:
            prefix = rng.choice(("", "/srv/tenants/acme/", "/srv/shared/", "/srv/tenants/"))
            tool = rng.choice(("read_file", "write_file"))
            args: Any = {"path": f.text(prefix), "content": "x"}
            ctx = ctx or context(rng.choice((("reader",), ("writer",))), "acme")
        elif kind == 1:
            prefix = rng.choice(("", "https://", "https://api.example.com", "https://docs."))
            tool, args = "fetch_url", {"url": f.text(prefix)}
        elif kind == 2:
            prefix = rng.choice(("", "select ", "with x as (", "SELECT * FROM t WHERE "))
            tool = "query_db"
            args = {"database": rng.choice(DATABASES[:3]), "query": f.text(prefix)}
            ctx = ctx or context(rng.choice((("analyst",), ("dba",))), "acme")
        elif kind == 3:
            tool = "run_command"
            command = rng.choice(("ls", "git", "uptime", f.text(longest=4)))
            argv = [f.text(rng.choice(("", "-", "-l", "log"))) for _ in range(rng.randint(0, 4))]
            args = {"command": command, "args": argv}
            ctx = ctx or context(("operator",), "acme")
        elif kind == 4:
            tool = "pay"
            args = {"from_account": rng.choice(ACCOUNTS[:3]), "amount": f.exact_number()}
            ctx = ctx or context(rng.choice((("clerk",), ("treasurer",))), "acme")
        elif kind == 5:
            tool = "search"
            args = {"tenant": rng.choice(("acme", "globex", f.text(longest=4))), "query": "x"}
        elif kind == 6:  # malformed shapes: random values under the configured names
            tool = rng.choice(tuple(EXAMPLE_DEFINITIONS))
            names = ("path", "url", "query", "database", "command", "args", "amount", "tenant")
            args = {name: f.value() for name in rng.sample(names, rng.randint(0, 4))}
            ctx = ctx or _owner_context(tool, rng.choice(("acme", "globex")))
        else:
            tool = rng.choice(TOOL_NAMES)
            args = rng.choice((f.value(), {**GOOD_ARGUMENTS.get(tool, {})}))
        b.add(f"fuzz {i} seed={seed}", tool, args, ctx or context(("reader",), "acme"))


# -- public entry points ---------------------------------------------------------------------

FUZZ_SEED: Final = 20_240_611


def build_corpus(*, fuzz: int = 1200) -> list[Case]:
    """The corpus for ``policies/data.json``: hand-written groups, then ``fuzz`` seeded cases."""
    b = _Builder()
    _shape_cases(b)
    _rbac_cases(b)
    _argument_cases(b)
    _fuzz_cases(b, fuzz, FUZZ_SEED)
    return b.cases


def data_variants(base: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Changed copies of the shipped data: settings relaxed, missing, malformed, or no data.

    Each variant keeps the same module set, so the corpus exercises other branches
    (defaults, misconfiguration denials) on both engines.
    """
    variants: list[tuple[str, dict[str, Any]]] = []

    def variant(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        data = copy.deepcopy(dict(base))
        variants.append((name, data))
        tools: dict[str, Any] = data["gateway"]["config"]["tools"]
        return data["gateway"]["config"], tools

    _, tools = variant("non_ascii_paths")
    tools["read_file"]["allow_non_ascii"] = True
    tools["write_file"]["allow_non_ascii"] = True

    _, tools = variant("defaults")
    tools["run_command"]["commands"]["ls"].pop("max_args")
    tools["fetch_url"].pop("ports")
    tools["fetch_url"]["domains"] = None
    tools["read_file"]["max_length"] = None
    tools["pay"].pop("cache_ttl_s")
    tools["search"]["kind"] = "GENERIC"
    del tools["add"]["kind"]

    config, tools = variant("malformed_settings")
    config["cache_ttl_s"] = 1.5
    config["roles"]["reader"]["tools"] = "read_file"
    config["roles"]["clerk"]["limits"] = {"payment_amount": "100"}
    config["roles"]["treasurer"]["limits"] = {"payment_amount": 100.5}
    config["resources"]["databases"] = ["acme_sales"]
    tools["read_file"]["roots"] = ["srv/tenants/{tenant}", 5, "/srv/shared"]
    tools["write_file"]["path_args"] = "path"
    tools["fetch_url"]["ports"] = ["443", 8443.0, None]
    tools["fetch_url"]["schemes"] = ["HTTPS", 1]
    tools["query_db"]["denied_functions"] = ["pg_sleep", "a(b", "", 3]
    tools["query_db"]["resource_args"] = ["database"]
    tools["pay"]["limits"] = [{"arg": "amount"}, {"arg": "amount", "limit": "payment_amount"}]
    tools["pay"]["cache_ttl_s"] = -1
    tools["run_command"]["commands"]["git"]["arg_patterns"] = ["[0-9]{1,3}", 7, "(log|diff)"]
    tools["run_command"]["commands"]["ls"]["max_args"] = "2"
    tools["search"]["tenant_args"] = "tenant"
    tools["add"]["cache_ttl_s"] = 30

    config, tools = variant("misconfigured_tools")
    config["cache_ttl_s"] = "60"
    tools["read_file"]["roots"] = []
    tools["write_file"].pop("path_args")
    tools["fetch_url"].pop("url_args")
    tools["query_db"]["sql_args"] = []
    tools["query_db"]["resource_args"] = {"database": "no_such_kind"}
    tools["pay"].pop("limits")
    tools["run_command"]["command_arg"] = ""
    tools["run_command"]["commands"] = []
    tools["search"]["resource_args"] = 5
    tools["add"] = "generic"

    variants.append(("no_data", {}))
    return variants
