"""Argument facts: security-relevant string arguments parsed by the gateway for the policy.

A tool's definition says which arguments hold SQL: a string property of the input schema
with ``"contentMediaType": "application/sql"`` (the JSON Schema content vocabulary with the
media type of RFC 6922). The gateway parses each such argument with PostgreSQL's own parser
and hands the policy the facts (``input.facts``), keyed by the argument's JSON pointer:

.. code-block:: json

    {"version": 1, "arguments": {"/query": {"sql": {"parsed": true, ...}}}}

The facts are a function of the definition and the argument values alone. A tool without
marked arguments gets ``{"version": 1, "arguments": {}}`` at no cost.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final

import cachetools

from gateway import _json
from gateway._definition import ToolDefinition
from gateway._numerals import array_index
from gateway.policy._sql_facts import sql_facts

#: The version of the ``facts`` member of the input document.
FACTS_VERSION: Final = 1

#: The media type (RFC 6922) that marks a string argument as SQL.
SQL_MEDIA_TYPE: Final = "application/sql"

#: Facts of a tool without marked arguments, as canonical JSON.
EMPTY_FACTS_JSON: Final = _json.canonical({"arguments": {}, "version": FACTS_VERSION})

# A marked location: property names, with None for "every member of an array".
Location = tuple[str | None, ...]

# Schemas deeper than this are not searched further for markers (nothing below is marked).
_MAX_SCHEMA_DEPTH: Final = 64
_COMBINATORS: Final = ("allOf", "anyOf", "oneOf", "if", "then", "else")

_MEMO_MAX_BYTES: Final = 16_384
_memo: cachetools.LRUCache[tuple[tuple[Location, ...], bytes], bytes] = cachetools.LRUCache(
    maxsize=4096
)
_memo_lock = threading.Lock()


def _is_sql(schema: Mapping[str, Any]) -> bool:
    media = schema.get("contentMediaType")
    return isinstance(media, str) and media.strip().lower() == SQL_MEDIA_TYPE


def _resolve(root: Mapping[str, Any], ref: Any) -> Any:
    # Only same-document JSON pointers ("#/$defs/query"); anything else is not followed.
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node: Any = root
    for escaped in ref[1:].split("/")[1:] if ref != "#" else []:
        token = escaped.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and (index := array_index(token)) is not None:
            if index >= len(node):
                return None
            node = node[index]
        else:
            return None
    return node


@functools.lru_cache(maxsize=4096)
def sql_locations(definition: ToolDefinition) -> tuple[Location, ...]:
    """The locations of the SQL-marked string arguments of a tool, sorted.

    Searched in ``properties``, ``items``, ``prefixItems``, the combinators (``allOf``,
    ``anyOf``, ``oneOf``, ``if``/``then``/``else``) and same-document ``$ref``; not in
    ``additionalProperties`` or ``patternProperties`` (a member there has no name the
    policy could configure). Locations hold property names, ``None`` for array members.
    """
    root = definition.input_schema
    found: set[Location] = set()
    stack: list[tuple[Any, Location, int, frozenset[int]]] = [(root, (), 0, frozenset())]
    while stack:
        schema, location, depth, seen = stack.pop()
        if not isinstance(schema, Mapping) or depth > _MAX_SCHEMA_DEPTH:
            continue
        if _is_sql(schema):
            found.add(location)
        ref = _resolve(root, schema.get("$ref"))
        if ref is not None and id(ref) not in seen:
            stack.append((ref, location, depth + 1, seen | {id(ref)}))
        for word in _COMBINATORS:
            parts = schema.get(word)
            for part in parts if isinstance(parts, list) else [parts]:
                stack.append((part, location, depth + 1, seen))
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            for name, child in properties.items():
                stack.append((child, (*location, name), depth + 1, seen))
        items = schema.get("items")
        if isinstance(items, Mapping):
            stack.append((items, (*location, None), depth + 1, seen))
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list):
            for child in prefix:
                stack.append((child, (*location, None), depth + 1, seen))
    return tuple(sorted(found, key=lambda loc: [("" if p is None else p) for p in loc]))


def json_pointer(tokens: tuple[str | int, ...]) -> str:
    """The JSON pointer (RFC 6901) of a member path."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def _instances(value: Any, location: Location) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 0, ())]
    while stack:
        node, step, path = stack.pop()
        if step == len(location):
            yield path, node
            continue
        name = location[step]
        if name is None:
            if isinstance(node, list):
                stack.extend((item, step + 1, (*path, i)) for i, item in enumerate(node))
        elif isinstance(node, dict) and name in node:
            stack.append((node[name], step + 1, (*path, name)))


def _compute(locations: tuple[Location, ...], canonical_arguments: bytes, decoded: Any) -> bytes:
    arguments = _json.parse(canonical_arguments, max_depth=10_000) if decoded is None else decoded
    facts: dict[str, Any] = {}
    for location in locations:
        for path, value in _instances(arguments, location):
            # A marked argument that is not a string has no SQL to parse: no facts, and
            # the policy refuses it for that.
            if isinstance(value, str):
                facts.setdefault(json_pointer(path), {})["sql"] = sql_facts(value)
    return _json.canonical({"arguments": facts, "version": FACTS_VERSION})


def facts_json(
    definition: ToolDefinition, canonical_arguments: bytes, *, value: Any = None
) -> bytes:
    """The ``facts`` member of the input document, as canonical JSON.

    Args:
        definition: the tool's definition (where the markers are).
        canonical_arguments: the arguments as canonical JSON.
        value: their strict decoding, when the caller has it (``None``: decoded here).

    Returns:
        ``{"arguments": {<pointer>: {"sql": <sql facts>}}, "version": 1}``; a tool without
        marked arguments gets :data:`EMPTY_FACTS_JSON` without its arguments being read.
    """
    locations = sql_locations(definition)
    if not locations:
        return EMPTY_FACTS_JSON
    if len(canonical_arguments) > _MEMO_MAX_BYTES:
        return _compute(locations, canonical_arguments, value)
    key = (locations, canonical_arguments)
    with _memo_lock:
        known = _memo.get(key)
    if known is None:
        known = _compute(locations, canonical_arguments, value)
        with _memo_lock:
            _memo[key] = known
    return known
