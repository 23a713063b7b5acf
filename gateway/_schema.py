"""Compilation of tool input schemas (JSON Schema, draft 2020-12 by default).

A compiled schema never loads anything from outside its own document: references resolve
only inside it or to the standard metaschemas. Formats are asserted, numbers compare
exactly, and a schema that cannot be used is refused when it is compiled, not when the first
call arrives.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any, Final

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.protocols import Validator
from jsonschema_specifications import REGISTRY as SPECIFICATIONS

from gateway import _json

#: Largest accepted schema document, raw and normalized, in bytes (1 MiB, as the seed).
MAX_SCHEMA_BYTES: Final = 1 << 20

_RESOURCE_URI: Final = "urn:gateway:input-schema"
_DEFAULT_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


class SchemaError(ValueError):
    """A schema document that cannot be compiled."""


def _is_integer(checker: Any, instance: Any) -> bool:
    # Exact decoding yields Decimal for "1.0"; JSON Schema counts it as an integer.
    if isinstance(instance, bool):
        return False
    if isinstance(instance, int):
        return True
    return (
        isinstance(instance, Decimal)
        and instance.is_finite()
        and instance == instance.to_integral_value()
    )


def _extend(cls: type[Validator]) -> type[Validator]:
    checker = cls.TYPE_CHECKER.redefine("integer", _is_integer)
    extended: type[Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        cls, type_checker=checker
    )
    return extended


def _refs(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            for key, value in current.items():
                if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                    yield value
                else:
                    stack.append(value)
        elif isinstance(current, list):
            stack.extend(current)


class CompiledSchema:
    """An immutable, thread-safe validator for one schema document."""

    __slots__ = ("_validator",)

    def __init__(self, validator: Validator) -> None:
        self._validator = validator

    def validate(self, value: Any) -> None:
        """Validate a decoded value.

        Raises:
            ValueError: the value does not satisfy the schema; the message names the first
                failing location and keyword.
        """
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        if error is not None:
            location = "/" + "/".join(str(part) for part in error.absolute_path)
            raise ValueError(f"validate value: at {location}: {error.message}")


def compile_schema(raw: bytes) -> CompiledSchema:
    """Parse, check and compile a schema document.

    Raises:
        SchemaError: empty, larger than 1 MiB (raw or normalized), not strict JSON, not an
            object, nested too deeply to process, an unknown ``$schema`` dialect, a
            metaschema violation (including an invalid ``pattern``), or a reference that is
            external or does not resolve.
    """
    try:
        return _compile(raw)
    except RecursionError:
        # Normalization and metaschema checking recurse; a deep document ends here, never
        # as a RecursionError out of bind().
        raise SchemaError("document nests too deeply") from None


def _compile(raw: bytes) -> CompiledSchema:
    if not raw:
        raise SchemaError("document is empty")
    if len(raw) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"document exceeds {MAX_SCHEMA_BYTES} bytes")
    try:
        document = _json.parse(raw, max_depth=10_000)
    except _json.StrictJSONError:
        raise SchemaError("document is not valid RFC 7493 JSON") from None
    if len(_json.canonical(document)) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"normalized document exceeds {MAX_SCHEMA_BYTES} bytes")
    if not isinstance(document, dict):
        raise SchemaError("document is not a JSON object")
    dialect = document.get("$schema", _DEFAULT_DIALECT)
    if not isinstance(dialect, str):
        raise SchemaError("$schema must be a string")
    # default=None (not a Validator) turns an unknown dialect into None instead of a warning.
    base = jsonschema.validators.validator_for({"$schema": dialect}, default=None)  # type: ignore[arg-type]
    if base is None:
        raise SchemaError(f"unsupported $schema dialect {dialect!r}")
    try:
        base.check_schema(document)
    except jsonschema.exceptions.SchemaError as exc:
        raise SchemaError(f"schema violates its metaschema: {exc.message}") from None
    specification = referencing.jsonschema.specification_with(dialect)
    resource = specification.create_resource(document)
    uri = document.get("$id")
    # The standard metaschemas plus this document, with no retrieve function: nothing
    # outside is ever fetched, over the network or from files.
    registry: referencing.Registry[Any] = SPECIFICATIONS.with_resource(
        uri if isinstance(uri, str) else _RESOURCE_URI, resource
    ).crawl()
    validator = _extend(base)(document, registry=registry, format_checker=base.FORMAT_CHECKER)
    resolver = registry.resolver_with_root(resource)
    for ref in _refs(document):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            raise SchemaError(f"reference {ref!r} is external or does not resolve") from None
    return CompiledSchema(validator)
