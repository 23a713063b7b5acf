r"""SQL facts: what PostgreSQL's own parser (libpg_query, through pglast) finds in a query.

The policy decides on these facts, never on the query text, so quoting (``"pg_sleep"``),
Unicode escapes (``U&"pg\\005fsleep"``), qualification (``pg_catalog.pg_sleep``), comments
and nesting cannot hide a function, a lock or a write from it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, Final

import cachetools
from pglast import ast, parse_sql, parser

#: Queries longer than this (in characters) are not parsed: the facts say ``too_long``.
#: (Parsing costs about 15 µs a character for long lists; the policy default is 10 000.)
MAX_SQL_LENGTH: Final = 20_000

# The locking clause strengths, as the SQL that writes them.
_LOCKING: Final[dict[str, str]] = {
    "LCS_FORKEYSHARE": "for key share",
    "LCS_FORSHARE": "for share",
    "LCS_FORNOKEYUPDATE": "for no key update",
    "LCS_FORUPDATE": "for update",
}
# Node types that change state wherever they occur (besides every statement but SELECT).
_WRITING_NODES: Final = frozenset(
    {"InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt", "IntoClause", "LockingClause"}
)
# Statements whose "relation" field names a table they write, never a CTE.
_TARGET_FIELDS: Final[dict[str, str]] = {
    "InsertStmt": "relation",
    "UpdateStmt": "relation",
    "DeleteStmt": "relation",
    "MergeStmt": "relation",
    "IntoClause": "rel",
}

_MEMO_MAX_CHARS: Final = 16_384
_memo: cachetools.LRUCache[str, dict[str, Any]] = cachetools.LRUCache(maxsize=4096)
_memo_lock = threading.Lock()


def sql_facts(text: str) -> dict[str, Any]:
    """What PostgreSQL's parser finds in ``text``, as a JSON-ready object.

    Never raises for any string. A query that does not parse (a syntax error, a NUL
    character, text that is not valid Unicode, more than :data:`MAX_SQL_LENGTH`
    characters) gives ``{"parsed": false, "error": <category>}``: the category is one of
    ``"syntax"``, ``"nul"``, ``"encoding"``, ``"too_long"``, and never quotes the text.
    Otherwise the facts are (lists sorted, without duplicates unless said otherwise):

    * ``statements``: the node type of each top-level statement, in order
      (``"SelectStmt"``, ``"InsertStmt"``, ...); empty for a query of only comments.
    * ``functions``: every function the query calls anywhere in its tree (subqueries,
      CTEs, ``ORDER BY``, window and ``FILTER`` clauses, ``LATERAL``, ``VALUES``,
      ``RETURNING``, defaults, ``TABLESAMPLE`` methods), each ``{"catalog", "schema",
      "name"}`` as PostgreSQL resolves the identifiers: unquoted ones folded to lower
      case, quoted ones exact, Unicode escapes decoded; ``catalog`` and ``schema`` are
      ``null`` when not written. Functions written as SQL syntax carry schema
      ``pg_catalog`` (``extract``, ``substring``, ``overlay``, ...).
    * ``relations``: every table, view or sequence named, ``{"catalog", "schema",
      "name"}``, without references to a CTE in scope.
    * ``locking``: the row-locking clauses (``"for update"``, ``"for no key update"``,
      ``"for share"``, ``"for key share"``).
    * ``operators``: every operator used, ``{"schema", "name"}`` (``"="``, ``"~~"`` for
      ``LIKE``, ``"BETWEEN"``; ``schema`` is ``null`` unless written as
      ``OPERATOR(schema.op)``). PostgreSQL reads any run of ``+-*/<>=~!@#%^&|`?``
      as an operator name, so MySQL's backtick quoting comes out as operator ``"`"``.
    * ``node_types``: the type of every node of the parse tree (PostgreSQL's parse node
      names), so a policy can refuse any construct it does not know.
    * ``writes``: whether anything may change state: any statement but ``SELECT``
      anywhere in the tree (data-modifying CTEs, ``EXPLAIN ANALYZE DELETE``, DDL),
      ``SELECT ... INTO`` or a row-locking clause. Conservative: ``SHOW`` counts too.
    * ``backslash_in_string``: a standard string literal (``'...'``, not ``E'...'`` or
      dollar-quoted) holds a backslash. Its meaning depends on the server's
      ``standard_conforming_strings`` setting, so the parse may not be the server's.
    """
    if len(text) <= _MEMO_MAX_CHARS:
        with _memo_lock:
            known = _memo.get(text)
        if known is None:
            known = _analyse(text)
            with _memo_lock:
                _memo[text] = known
        return _copy(known)
    return _analyse(text)


def _copy(facts: dict[str, Any]) -> dict[str, Any]:
    # Callers get their own lists; the members are immutable or fresh dicts.
    return {
        key: [dict(v) if isinstance(v, dict) else v for v in value]
        if isinstance(value, list)
        else value
        for key, value in facts.items()
    }


def _unparsed(category: str) -> dict[str, Any]:
    return {"parsed": False, "error": category}


def _analyse(text: str) -> dict[str, Any]:
    if len(text) > MAX_SQL_LENGTH:
        return _unparsed("too_long")
    if "\0" in text:
        # libpg_query reads a C string: it would stop at the NUL and see less than the text.
        return _unparsed("nul")
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        return _unparsed("encoding")
    try:
        statements = parse_sql(text)
        tokens = parser.scan(text)
    except Exception:  # noqa: BLE001 - any parser failure means "does not parse"
        return _unparsed("syntax")
    try:
        return _Walk(statements).facts() | {
            "backslash_in_string": _backslash_in_string(encoded, tokens)
        }
    except Exception:  # noqa: BLE001 - an unexpected tree is refused, never raised
        return _unparsed("syntax")


def _backslash_in_string(encoded: bytes, tokens: Iterable[Any]) -> bool:
    for token in tokens:
        if token.name != "SCONST":
            continue
        # Token offsets are byte offsets into the UTF-8 text, end inclusive.
        literal = encoded[token.start : token.end + 1]
        if b"\\" in literal and literal[:1] not in (b"E", b"e", b"$"):
            return True
    return False


def _name(parts: Any) -> dict[str, Any]:
    names = [part.sval if isinstance(part, ast.String) else None for part in parts or ()]
    if not names or any(not isinstance(n, str) for n in names) or len(names) > 3:
        # Not a name PostgreSQL could resolve: reported so that no allow-list matches it.
        return {"catalog": None, "schema": None, "name": None, "malformed": True}
    padded = [None, None, *names][-3:]
    return {"catalog": padded[0], "schema": padded[1], "name": padded[2]}


def _relation(node: ast.RangeVar) -> dict[str, Any]:
    return {"catalog": node.catalogname, "schema": node.schemaname, "name": node.relname}


def _key(entry: dict[str, Any]) -> tuple[str, ...]:
    return tuple("" if value is None else str(value) for value in entry.values())


class _Walk:
    """One iterative pass over every node of the parse tree (no recursion limit)."""

    def __init__(self, statements: Iterable[ast.RawStmt]) -> None:
        self.statements = [type(raw.stmt).__name__ for raw in statements]
        self.roots = [raw.stmt for raw in statements]
        self.types: set[str] = set()
        self.functions: dict[tuple[str, ...], dict[str, Any]] = {}
        self.relations: dict[tuple[str, ...], dict[str, Any]] = {}
        self.locking: set[str] = set()
        self.operators: dict[tuple[str, ...], dict[str, Any]] = {}

    def facts(self) -> dict[str, Any]:
        stack: list[tuple[Any, frozenset[str]]] = [(root, frozenset()) for root in self.roots]
        while stack:
            node, ctes = stack.pop()
            if isinstance(node, list | tuple):
                stack.extend((item, ctes) for item in node)
            elif isinstance(node, ast.Node):
                self._visit(node, ctes, stack)
        statements_anywhere = {t for t in self.types if t.endswith("Stmt")}
        writes = bool(self.types & _WRITING_NODES) or bool(statements_anywhere - {"SelectStmt"})
        return {
            "parsed": True,
            "statements": self.statements,
            "functions": [self.functions[k] for k in sorted(self.functions)],
            "relations": [self.relations[k] for k in sorted(self.relations)],
            "locking": sorted(self.locking),
            "operators": [self.operators[k] for k in sorted(self.operators)],
            "node_types": sorted(self.types),
            "writes": writes,
        }

    def _visit(
        self, node: ast.Node, ctes: frozenset[str], stack: list[tuple[Any, frozenset[str]]]
    ) -> None:
        kind = type(node).__name__
        self.types.add(kind)
        self._record(node, ctes)
        inner = ctes
        with_clause = getattr(node, "withClause", None)
        scoped = isinstance(with_clause, ast.WithClause)
        if isinstance(with_clause, ast.WithClause):
            inner = self._with(with_clause, ctes, stack)
        target = _TARGET_FIELDS.get(kind)
        fields: Iterable[str] = getattr(node, "__slots__", ())
        for field in fields:
            if scoped and field == "withClause":
                continue
            value = getattr(node, field, None)
            if isinstance(value, ast.Node | list | tuple):
                # A statement's target table is a table even if a CTE has its name.
                stack.append((value, frozenset() if field == target else inner))

    def _record(self, node: ast.Node, ctes: frozenset[str]) -> None:
        if isinstance(node, ast.FuncCall):
            self._function(node.funcname)
        elif isinstance(node, ast.RangeTableSample):
            # A sampling method is a function (tsm_handler), e.g. system_time from tsm_system_time.
            self._function(node.method)
        elif isinstance(node, ast.RangeVar):
            if node.schemaname is None and node.catalogname is None and node.relname in ctes:
                return  # a reference to a CTE in scope, not a table
            entry = _relation(node)
            self.relations[_key(entry)] = entry
        elif isinstance(node, ast.A_Expr):
            self._operator(node.name)
        elif isinstance(node, ast.SubLink) and node.operName:
            self._operator(node.operName)
        elif isinstance(node, ast.SortBy) and node.useOp:
            self._operator(node.useOp)
        elif isinstance(node, ast.LockingClause):
            strength = getattr(node.strength, "name", str(node.strength))
            self.locking.add(_LOCKING.get(strength, strength.lower()))

    def _with(
        self,
        clause: ast.WithClause,
        ctes: frozenset[str],
        stack: list[tuple[Any, frozenset[str]]],
    ) -> frozenset[str]:
        self.types.add("WithClause")
        members = [cte for cte in clause.ctes or () if isinstance(cte, ast.CommonTableExpr)]
        if len(members) != len(clause.ctes or ()):
            stack.append((clause.ctes, ctes))  # unexpected members: walked without scoping
        names = [cte.ctename for cte in members if isinstance(cte.ctename, str)]
        everything = ctes | frozenset(names)
        for index, cte in enumerate(members):
            # A non-recursive CTE sees only the CTEs before it; a recursive WITH sees all.
            visible = everything if clause.recursive else ctes | frozenset(names[:index])
            stack.append((cte, visible))
        return everything

    def _function(self, parts: Any) -> None:
        entry = _name(parts)
        self.functions[_key(entry)] = entry

    def _operator(self, parts: Any) -> None:
        # An operator is a function too: OPERATOR(myschema.===) can run anything.
        named = _name(parts)
        entry = {"schema": named["schema"], "name": named["name"]}
        if named["catalog"] is not None or "malformed" in named:
            entry = {"schema": None, "name": None, "malformed": True}
        self.operators[_key(entry)] = entry
