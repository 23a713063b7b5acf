"""Compilation of tool input schemas (JSON Schema, draft 2020-12 by default).

A compiled schema never loads anything from outside its own document: references resolve
by the specification's base-URI rules (``$id``, ``$anchor``, ``$dynamicAnchor``), only
inside the document or to the standard metaschemas. Formats are asserted (a format with no
checker is refused), numbers compare exactly at any size, ``pattern`` is ECMA-262, and a
schema that cannot be used is refused when it is compiled, not when the first call arrives.

A refusal names the JSON pointer of the failing value and the failed keyword, in plain
words, and never quotes the value: only the schema's own constants appear, and a member
name appears only where the schema itself declares it (any other is shown as ``*``).
"""

from __future__ import annotations

import decimal
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, Final

import attrs
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema._utils import is_valid
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing._core import Resolver

from gateway import _formats, _json
from gateway._ecma_re2 import UntranslatableError, compile_linear

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


# --- exact numbers ------------------------------------------------------------------------


def is_multiple(value: int | Decimal, divisor: int | Decimal) -> bool:
    """Whether ``value`` is an integer multiple of ``divisor`` (> 0), exactly, at any size.

    The quotient is computed with enough precision to hold it whole whenever it is an
    integer, so an inexact division means it is not one.
    """
    value, divisor = Decimal(value), Decimal(divisor)
    if value.is_zero():
        return True
    digits = len(value.as_tuple().digits) + 4 * len(divisor.as_tuple().digits) + 10
    context = decimal.Context(prec=digits, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[])
    quotient = context.divide(value, divisor)
    if context.flags[decimal.Inexact] or context.flags[decimal.InvalidOperation]:
        return False
    return quotient == quotient.to_integral_value(context=context)


def _multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "number") and not is_multiple(instance, divisor):
        yield ValidationError("not a multiple")


# --- ECMA-262 patterns --------------------------------------------------------------------


def _matches(pattern: str, text: str) -> bool:
    # RE2, in time linear in the text: a backtracking engine gives a caller who controls
    # a 1 MiB argument quadratic or exponential time (see gateway._ecma_re2). Every pattern
    # was translated when its schema was compiled.
    return compile_linear(pattern).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError("does not match")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, item in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(item, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties")
    extras = [key for key in instance if key not in properties]
    if patterns and extras:
        extras = [key for key in extras if not any(_matches(p, key) for p in patterns)]
    return extras


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield ValidationError("additional members")


def _evaluated_keys(validator: Any, instance: Any, schema: Any) -> list[str]:  # noqa: PLR0912
    # jsonschema's own walk (properties, patternProperties, in-place applicators), with
    # patternProperties matched by the ECMA-262 engine.
    if validator.is_type(schema, "boolean"):
        return []
    keys: list[str] = []
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)  # noqa: SLF001 - as jsonschema does
            keys.extend(
                _evaluated_keys(
                    validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                    instance,
                    resolved.contents,
                )
            )
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys += properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys += (
                key
                for key, item in instance.items()
                if is_valid(validator.descend(item, subschema))
            )
    for pattern in schema.get("patternProperties", {}):
        keys += (key for key in instance if _matches(pattern, key))
    for key, subschema in schema.get("dependentSchemas", {}).items():
        if key in instance:
            keys += _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if is_valid(validator.descend(instance, subschema)):
                keys += _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys += _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys += _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys += _evaluated_keys(validator, instance, schema["else"])
    return keys


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = set(_evaluated_keys(validator, instance, schema))
    for key in instance:
        if key not in evaluated and not is_valid(
            validator.descend(instance[key], unevaluated, path=key, schema_path=key)
        ):
            yield ValidationError("unevaluated members")
            return


# --- formats ------------------------------------------------------------------------------

_FORMAT_CHECKER: Final = jsonschema.FormatChecker(formats=())
for _name, _check in _formats.CHECKERS.items():
    # A non-string instance passes every format, as the specification says.
    _FORMAT_CHECKER.checks(_name)(
        lambda instance, check=_check: not isinstance(instance, str) or check(instance)
    )
for _name, _instance_check in _formats.INSTANCE_CHECKERS.items():
    _FORMAT_CHECKER.checks(_name)(_instance_check)


_OVERRIDES: Final[dict[str, Any]] = {
    "multipleOf": _multiple_of,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
}


def _extend(cls: type[Validator]) -> type[Validator]:
    checker = cls.TYPE_CHECKER.redefine("integer", _is_integer)
    overrides = {name: check for name, check in _OVERRIDES.items() if name in cls.VALIDATORS}
    if "dependentRequired" in cls.VALIDATORS and "dependencies" not in cls.VALIDATORS:
        # The pre-2019 keyword (split into dependentRequired and dependentSchemas) is
        # still enforced, as the suite's compatibility tests expect: a tool author who
        # writes it means it, and ignoring it would admit what the author refused.
        overrides["dependencies"] = _LEGACY_DEPENDENCIES
    extended: type[Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        cls, type_checker=checker, validators=overrides, format_checker=_FORMAT_CHECKER
    )
    # jsonschema's evolve() picks the stock class again for a subschema that names its
    # $schema; the gateway's rules (ECMA-262, exact numbers, integers, formats) must hold
    # in every subschema, so the gateway's class for that dialect is used instead.
    extended.evolve = _evolve  # type: ignore[method-assign]
    return extended


def _evolve(self: Any, **changes: Any) -> Any:
    # On the hot path (every subschema descended): the common case costs one lookup.
    schema = changes.setdefault("schema", self.schema)
    cls = type(self)
    if type(schema) is dict and "$schema" in schema and isinstance(schema["$schema"], str):
        named = jsonschema.validators.validator_for(schema, default=None)  # type: ignore[arg-type]
        cls = cls if named is None else _GATEWAY_CLASSES.get(named, cls)
    for name, alias in _INIT_FIELDS[cls]:
        if alias not in changes:
            changes[alias] = getattr(self, name)
    return cls(**changes)


_LEGACY_DEPENDENCIES: Final = jsonschema.Draft7Validator.VALIDATORS["dependencies"]
_GATEWAY_CLASSES: Final[dict[Any, type[Validator]]] = {}
for _draft in (
    jsonschema.Draft3Validator,
    jsonschema.Draft4Validator,
    jsonschema.Draft6Validator,
    jsonschema.Draft7Validator,
    jsonschema.Draft201909Validator,
    jsonschema.Draft202012Validator,
):
    _GATEWAY_CLASSES[_draft] = _extend(_draft)
_INIT_FIELDS: Final = {
    cls: tuple((f.name, f.alias) for f in attrs.fields(cls) if f.init)  # type: ignore[arg-type]
    for cls in _GATEWAY_CLASSES.values()
}


# --- refusal messages ---------------------------------------------------------------------

_ARTICLES: Final = {
    "integer": "an integer",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _constant(value: Any) -> str:
    # Schema constants only (never instance data), as JSON.
    try:
        text = _json.canonical(value).decode("utf-8")
    except _json.StrictJSONError:
        return "the schema's value"
    return text if len(text) <= 80 else text[:77] + "..."


def _type_phrase(kind: Any) -> str:
    kinds = kind if isinstance(kind, list) else [kind]
    names = [_ARTICLES.get(k, f"a {k}") if isinstance(k, str) else "?" for k in kinds]
    return " or ".join(names)


def _phrase(error: ValidationError) -> str:  # noqa: PLR0911, PLR0912 - one table
    keyword = error.validator
    value = error.validator_value
    instance = error.instance
    if keyword == "type":
        return f"must be {_type_phrase(value)}"
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        words = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "greater than",
            "exclusiveMaximum": "less than",
        }[str(keyword)]
        return f"must be {words} {_constant(value)}"
    if keyword == "multipleOf":
        return f"must be a multiple of {_constant(value)}"
    if keyword in ("minLength", "maxLength"):
        words = "at least" if keyword == "minLength" else "at most"
        return f"must be {words} {_constant(value)} characters long"
    if keyword in ("minItems", "maxItems"):
        words = "at least" if keyword == "minItems" else "at most"
        return f"must have {words} {_constant(value)} items"
    if keyword in ("minProperties", "maxProperties"):
        words = "at least" if keyword == "minProperties" else "at most"
        return f"must have {words} {_constant(value)} members"
    if keyword in ("minContains", "maxContains"):
        words = "at least" if keyword == "minContains" else "at most"
        return f"must have {words} {_constant(value)} items that match contains"
    if keyword == "contains":
        return "must have an item that matches contains"
    if keyword == "uniqueItems":
        return "must not have equal items"
    if keyword == "pattern":
        return f"must match the pattern {_constant(value)}"
    if keyword == "format":
        limit = _formats.MAX_REGEX_CHARS
        if value == "regex" and isinstance(instance, str) and len(instance) > limit:
            return f"must be a regex of at most {limit} characters"
        return f"must be a valid {_constant(value)}"
    if keyword == "enum":
        return "must be one of the values the schema lists"
    if keyword == "const":
        return "must equal the value the schema gives"
    if keyword == "required" and isinstance(value, list) and isinstance(instance, dict):
        missing = [name for name in value if name not in instance]
        return "must have the member " + ", ".join(_constant(name) for name in missing)
    if keyword == "dependentRequired" and isinstance(value, dict) and isinstance(instance, dict):
        for name, needed in value.items():
            if name in instance and any(other not in instance for other in needed):
                return f"must have the members {_constant(needed)} when it has {_constant(name)}"
    if keyword in ("additionalProperties", "unevaluatedProperties"):
        return "has a member the schema does not allow"
    if keyword in ("items", "unevaluatedItems", "prefixItems"):
        return "has an item the schema does not allow"
    if keyword == "not":
        return "must not match the schema in not"
    if keyword == "anyOf":
        return "must match at least one schema in anyOf"
    if keyword == "oneOf":
        return "must match exactly one schema in oneOf"
    if keyword is None:
        return "is not allowed here (false schema)"
    return "does not satisfy the schema"


def _location(error: ValidationError, declared: frozenset[str]) -> str:
    parts = []
    for part in error.absolute_path:
        if isinstance(part, int):
            parts.append(str(part))
        elif part in declared:
            parts.append(part.replace("~", "~0").replace("/", "~1"))
        else:
            # A member name the schema does not declare is caller data: never quoted.
            parts.append("*")
    return "/" + "/".join(parts) if parts else "(root)"


def describe(error: ValidationError, declared: frozenset[str]) -> str:
    """A refusal message that names where and which keyword, never the value."""
    keyword = "false schema" if error.validator is None else str(error.validator)
    phrase = _phrase(error)
    path = [str(part) for part in error.absolute_schema_path]
    if "propertyNames" in path:
        phrase = "a member name " + phrase.removeprefix("has a member the schema")
        keyword = f"propertyNames/{keyword}"
    return f"{_location(error, declared)}: {phrase} ({keyword})"


class CompiledSchema:
    """An immutable, thread-safe validator for one schema document."""

    __slots__ = ("_declared", "_validator")

    def __init__(self, validator: Validator, declared: frozenset[str]) -> None:
        self._validator = validator
        self._declared = declared

    def validate(self, value: Any) -> None:
        """Validate a decoded value.

        Raises:
            ValueError: the value does not satisfy the schema; the message names the first
                failing location and keyword, and never quotes the value.
        """
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        if error is not None:
            raise ValueError(describe(error, self._declared))


# --- compilation --------------------------------------------------------------------------


def compile_schema(raw: bytes) -> CompiledSchema:
    """Parse, check and compile a schema document.

    Raises:
        SchemaError: empty, larger than 1 MiB (raw or normalized), not strict JSON, not an
            object or boolean, nested too deeply to process, an unknown ``$schema`` dialect, a
            metaschema violation (including a ``pattern`` that is not ECMA-262), a format
            with no checker, or a reference that is external or does not resolve.
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
    if isinstance(document, bool):
        # A boolean schema admits everything or nothing (tool definitions require objects).
        return CompiledSchema(
            _GATEWAY_CLASSES[jsonschema.Draft202012Validator](document), frozenset()
        )
    if not isinstance(document, dict):
        raise SchemaError("document is not a JSON object or boolean")
    dialect = document.get("$schema", _DEFAULT_DIALECT)
    if not isinstance(dialect, str):
        raise SchemaError("$schema must be a string")
    # default=None (not a Validator) turns an unknown dialect into None instead of a warning.
    base = jsonschema.validators.validator_for({"$schema": dialect}, default=None)  # type: ignore[arg-type]
    if base is None:
        raise SchemaError(f"unsupported $schema dialect {dialect!r}")
    cls = _GATEWAY_CLASSES[base]
    # The metaschema is checked with the gateway's own integer type (2.0 is an integer)
    # and formats (a pattern must be ECMA-262).
    meta = cls(base.META_SCHEMA, format_checker=_FORMAT_CHECKER)
    problem = jsonschema.exceptions.best_match(meta.iter_errors(document))
    if problem is not None:
        names = frozenset(str(part) for part in problem.absolute_path)
        raise SchemaError(f"schema violates its metaschema: {describe(problem, names)}")
    specification = referencing.jsonschema.specification_with(dialect)
    resource = specification.create_resource(document)
    uri = document.get("$id")
    # The standard metaschemas plus this document, with no retrieve function: nothing
    # outside is ever fetched, over the network or from files.
    registry: referencing.Registry[Any] = SPECIFICATIONS.with_resource(
        uri if isinstance(uri, str) else _RESOURCE_URI, resource
    ).crawl()
    declared = _check_document(registry, resource, specification)
    validator = cls(document, registry=registry, format_checker=_FORMAT_CHECKER)
    return CompiledSchema(validator, declared)


def _check_document(
    registry: referencing.Registry[Any],
    root: referencing.Resource[Any],
    specification: referencing.Specification[Any],
) -> frozenset[str]:
    # Walks every subschema (only schema positions: enum and const data are never taken
    # for schemas) with the base URI the specification gives it, and every schema a
    # reference reaches. Each $ref and $dynamicRef must resolve there; each format must
    # have a checker. Returns the member names the schema declares.
    declared: set[str] = set()
    resolver = registry.resolver_with_root(root)
    stack: list[tuple[Resolver[Any], referencing.Resource[Any]]] = [(resolver, root)]
    seen: set[tuple[int, str]] = set()
    while stack:
        current, resource = stack.pop()
        contents = resource.contents
        mark = (id(contents), current._base_uri)  # noqa: SLF001 - the base is the identity
        if mark in seen or not isinstance(contents, dict):
            continue
        seen.add(mark)
        _declare(contents, declared)
        _check_patterns(contents)
        fmt = contents.get("format")
        if isinstance(fmt, str) and not (
            fmt in _formats.CHECKERS or fmt in _formats.INSTANCE_CHECKERS
        ):
            raise SchemaError(f"format {fmt!r} has no checker, so it cannot be asserted")
        for keyword in ("$ref", "$dynamicRef"):
            ref = contents.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                resolved = current.lookup(ref)
            except referencing.exceptions.Unresolvable:
                raise SchemaError(f"reference {ref!r} is external or does not resolve") from None
            # The resolver of a lookup already stands at the target's own base URI.
            stack.append((resolved.resolver, specification.create_resource(resolved.contents)))
        for subresource in resource.subresources():
            stack.append((current.in_subresource(subresource), subresource))
    return frozenset(declared)


def _check_patterns(contents: Mapping[str, Any]) -> None:
    # Each pattern must have a meaning matched in linear time (no lookaround, no
    # backreference); it is refused here, when the schema is compiled, not at a call.
    patterns = [contents.get("pattern")]
    properties = contents.get("patternProperties")
    if isinstance(properties, Mapping):
        patterns.extend(properties)
    for pattern in patterns:
        if not isinstance(pattern, str):
            continue
        try:
            _formats.ecma_regex(pattern)
        except ValueError:
            continue  # the metaschema's own check (format: regex) names it
        try:
            compile_linear(pattern)
        except UntranslatableError as exc:
            raise SchemaError(
                f"pattern {pattern!r} cannot be matched in linear time ({exc}); lookaround "
                "and backreferences are not supported"
            ) from None


def _declare(contents: Mapping[str, Any], declared: set[str]) -> None:
    for keyword in ("properties", "dependentRequired", "dependentSchemas"):
        names = contents.get(keyword)
        if isinstance(names, dict):
            declared.update(names)
    required = contents.get("required")
    if isinstance(required, list):
        declared.update(name for name in required if isinstance(name, str))
