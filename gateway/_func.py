"""Func: a typed Python function (sync or async) adapted to the Tool protocol.

The input schema is derived from the function's signature, and a strict decoder (pydantic
in strict JSON mode) enforces what JSON Schema cannot: ``1.0`` and ``true`` are not integers,
unknown members are refused, numbers must be finite. The same decoder runs at admission (as
the input validator) and before the call, so a function only ever sees arguments that passed
both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final, overload

import pydantic
import pydantic.json_schema
import pydantic_core

from gateway import _formats
from gateway._contract import InputValidator, Invocation, ValueFreeRefusalError
from gateway._definition import ToolDefinition
from gateway._errors import InvalidToolError, InvalidToolOutputError
from gateway._output import ToolOutput

_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
_CONFIG: Final = pydantic.ConfigDict(
    extra="forbid", strict=True, allow_inf_nan=False, arbitrary_types_allowed=False
)


def _arguments_model(fn: Callable[..., Any], name: str) -> type[pydantic.BaseModel]:
    try:
        signature = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError, ValueError) as exc:
        raise InvalidToolError.because(f"signature of {name!r}: {exc}") from None
    fields: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise InvalidToolError.because(
                f"{name!r}: *args and **kwargs cannot be described by a schema"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise InvalidToolError.because(
                f"{name!r}: positional-only parameter {parameter.name!r}"
            )
        if parameter.annotation is parameter.empty:
            raise InvalidToolError.because(
                f"{name!r}: parameter {parameter.name!r} needs a type annotation"
            )
        if parameter.name.startswith("_"):
            raise InvalidToolError.because(
                f"{name!r}: parameter {parameter.name!r} must not start with an underscore"
            )
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (parameter.annotation, default)
    try:
        model: type[pydantic.BaseModel] = pydantic.create_model(
            f"{name}_arguments", __config__=_CONFIG, **fields
        )
    except Exception as exc:  # noqa: BLE001 - pydantic raises several unrelated types here
        raise InvalidToolError.because(f"{name!r}: input type: {exc}") from None
    return model


class _DecimalsAsNumbers(pydantic.json_schema.GenerateJsonSchema):
    # pydantic describes a Decimal parameter as a number or a string, and its decoder reads
    # a string as a number (" 5 ", "5_0", Arabic-Indic digits): the policy would be shown a
    # string while the function ran on a number. A Decimal is a JSON number here, so a
    # string is refused at admission by the schema itself.
    def decimal_schema(self, schema: pydantic_core.core_schema.DecimalSchema) -> Any:
        described = super().decimal_schema(schema)
        if isinstance(described, dict) and isinstance(described.get("anyOf"), list):
            number = [form for form in described["anyOf"] if form.get("type") == "number"]
            if len(number) == 1:
                return number[0]
        return described


def _derive_schema(model: type[pydantic.BaseModel], name: str) -> dict[str, Any]:
    try:
        schema = model.model_json_schema(schema_generator=_DecimalsAsNumbers)
    except Exception as exc:  # noqa: BLE001 - as above, for types pydantic cannot describe
        raise InvalidToolError.because(f"{name!r}: input schema: {exc}") from None
    schema.pop("title", None)
    _drop_unassertable_formats(schema)
    return {"$schema": _DIALECT, **schema}


def _drop_unassertable_formats(schema: Any) -> None:
    # pydantic names formats of its own ("binary", "base64", "path", ...) that no JSON
    # Schema checker asserts; the strict decoder enforces them, so they leave the schema.
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("format"), str) and node["format"] not in _formats.CHECKERS:
                del node["format"]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _declared_names(schema: Any) -> frozenset[str]:
    # Member names the derived schema declares (parameters, model and TypedDict fields).
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                names.update(properties)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(names)


# Digits become "0" and "E" becomes "e", so that a digit followed by an exponent mark is
# b"0e" and a run of 309 digits is 309 zeros: two substring searches over one translated
# copy. (The regular expression ``[0-9][eE]|[0-9]{309}`` cost about 26 ns per byte here,
# 57 us for 2 KB of arguments on every call; this costs a few.)
_DIGITS_AND_EXPONENTS: Final = bytes.maketrans(b"123456789E", b"000000000e")
_DIGIT_RUN: Final = b"0" * 309


def _overflow_risk(raw: bytes) -> bool:
    # Whether ``raw`` holds a digit followed by "e" or "E", or 309 digits in a row.
    if len(raw) < len(_DIGIT_RUN) and b"e" not in raw and b"E" not in raw:
        return False  # short arguments without an "e" (most), without the copy
    marked = raw.translate(_DIGITS_AND_EXPONENTS)
    return b"0e" in marked or _DIGIT_RUN in marked


# The shortest run of digits an integer beyond 2**53 needs (9007199254740993 has 16).
_LONG_INTEGER: Final = b"0" * 16
#: Integers from -(2**53) to 2**53 are each a double exactly.
_EXACT_INTEGERS: Final = 2**53


def _long_integer_risk(raw: bytes) -> bool:
    # Whether ``raw`` holds 16 digits in a row: only then can an integer no double holds
    # be in it (most arguments have no such run, and are not walked).
    if len(raw) < len(_LONG_INTEGER):
        return False
    return _LONG_INTEGER in raw.translate(_DIGITS_AND_EXPONENTS)


def _rounded_integer(sent: object, decoded: object) -> bool:
    # Whether an integer of the sent document reaches the decoded arguments as another
    # number: a float (or Decimal) parameter reads 9007199254740993 as 9007199254740992,
    # while the policy compared the integer as sent. The sent document (json.loads: its
    # integers exact) and the decoded value are walked side by side; where their shapes
    # cannot be paired (a set, a custom type), an integer no double holds counts as rounded.
    stack = [(sent, decoded)]
    while stack:
        exact, read = stack.pop()
        if isinstance(exact, bool) or exact is None or isinstance(exact, str | float):
            continue
        if isinstance(exact, int):
            # Compared exactly (Python compares an int with a float or a Decimal by value):
            # an int parameter keeps the integer, a float one only if a double holds it.
            if abs(exact) > _EXACT_INTEGERS and not (
                isinstance(read, int | float | Decimal)
                and not isinstance(read, bool)
                and read == exact
            ):
                return True
            continue
        pairs = _paired(exact, read)
        if pairs is None:
            if _holds_long_integer(exact):
                return True
            continue
        stack.extend(pairs)
    return False


def _paired(exact: object, read: object) -> list[tuple[object, object]] | None:
    # The (sent, decoded) pairs one level down, or None where the shapes do not pair.
    if isinstance(exact, dict):
        if isinstance(read, pydantic.BaseModel):
            pairs = []
            for name, field in type(read).model_fields.items():
                key = field.alias or name
                if key in exact:
                    pairs.append((exact[key], getattr(read, name)))
            return pairs
        if dataclasses.is_dataclass(read) and not isinstance(read, type):
            return [
                (exact[field.name], getattr(read, field.name))
                for field in dataclasses.fields(read)
                if field.name in exact
            ]
        if isinstance(read, dict):
            return [(exact[key], read[key]) for key in exact if key in read]
        return None
    if isinstance(exact, list) and isinstance(read, list | tuple) and len(read) == len(exact):
        return list(zip(exact, read, strict=True))
    return None


def _holds_long_integer(value: object) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, int) and not isinstance(node, bool):
            if abs(node) > _EXACT_INTEGERS:
                return True
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _non_finite(value: object) -> bool:
    # A number too large for a float decodes to inf where the annotation does not refuse it
    # (Any, object, nested models with their own config); the seed refuses it.
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                return True
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list | tuple | set | frozenset):
            stack.extend(node)
        elif isinstance(node, pydantic.BaseModel):
            stack.extend(getattr(node, name) for name in type(node).model_fields)
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            stack.extend(getattr(node, field.name) for field in dataclasses.fields(node))
    return False


def _decode(
    model: type[pydantic.BaseModel], raw: bytes, declared: frozenset[str]
) -> pydantic.BaseModel:
    # The one strict decoder, shared by admission (the input validator) and call.
    try:
        decoded = model.model_validate_json(raw, strict=True)
    except pydantic.ValidationError as exc:
        raise ValueFreeRefusalError(_describe(exc, declared)) from None
    # Only a number literal with an exponent or of 309 digits or more can overflow a float:
    # without one in the bytes, the walk over the decoded value is skipped.
    if _overflow_risk(raw) and _non_finite(decoded):
        raise ValueFreeRefusalError("decode: numbers must be finite")
    if _long_integer_risk(raw) and _rounded_integer(json.loads(raw), decoded):
        raise ValueFreeRefusalError(
            "decode: an integer beyond 2**53 would reach the function as another number"
        )
    return decoded


def _strict_decoder(model: type[pydantic.BaseModel], declared: frozenset[str]) -> InputValidator:
    # Captures only the model class, never the Func or the function, so a contract that
    # holds this validator does not keep the executable alive.
    def validate(raw: bytes) -> None:
        _decode(model, raw, declared)

    return validate


# pydantic's messages for these error types are fixed text plus constraint values from
# the signature (never the input); every other type is named by its code alone, since
# its message may quote the input (union tags, custom validators, parse errors).
_CONSTRAINTS: Final = frozenset(
    {
        "gt",
        "ge",
        "lt",
        "le",
        "multiple_of",
        "min_length",
        "max_length",
        "pattern",
        "expected",
        "max_digits",
        "decimal_places",
        "whole_digits",
        "field_type",
    }
)
_SAFE_MESSAGES: Final = frozenset(
    {
        "missing",
        "extra_forbidden",
        "int_type",
        "int_from_float",
        "float_type",
        "string_type",
        "bool_type",
        "none_required",
        "list_type",
        "tuple_type",
        "dict_type",
        "model_type",
        "model_attributes_type",
        "dataclass_type",
        "dataclass_exact_type",
        "literal_error",
        "enum",
        "too_short",
        "too_long",
        "string_too_short",
        "string_too_long",
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "multiple_of",
        "string_pattern_mismatch",
        "finite_number",
        "int_parsing_size",
        "bytes_type",
        "set_type",
        "frozen_set_type",
        "date_type",
        "datetime_type",
        "time_type",
        "timedelta_type",
        "uuid_type",
        "decimal_type",
        "is_instance_of",
        "union_tag_not_found",
        "json_type",
        "unexpected_keyword_argument",
        "missing_keyword_only_argument",
        "typed_dict_type",
    }
)


def _location(loc: tuple[int | str, ...], declared: frozenset[str]) -> str:
    parts = []
    for part in loc:
        if isinstance(part, int):
            parts.append(str(part))
        elif part in declared:
            parts.append(part.replace("~", "~0").replace("/", "~1"))
        else:
            # A member name the signature does not declare is caller data: never quoted.
            parts.append("*")
    return "/" + "/".join(parts) if parts else "(root)"


def _describe(exc: pydantic.ValidationError, declared: frozenset[str]) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False, include_context=True):
        kind = error["type"]
        context = error.get("ctx") or {}
        if kind in _SAFE_MESSAGES and set(context) <= _CONSTRAINTS:
            message = error["msg"]
        else:
            message = "does not decode"
        parts.append(f"{_location(error['loc'], declared)}: {message} ({kind})")
    return "decode: " + "; ".join(parts)


def _encode_result(result: object) -> ToolOutput:
    if isinstance(result, ToolOutput):
        return result
    if isinstance(result, str):
        return ToolOutput.from_text(str(result))
    try:
        # NaN and infinities are not JSON: they fail here (as in the seed) rather than being
        # turned into strings or nulls.
        return ToolOutput.from_json(pydantic_core.to_json(result, inf_nan_mode="constants"))
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as exc:
        raise InvalidToolOutputError(f"tool: encode function result: {exc}") from None


class Func:
    """A typed function as a Tool.

    The input schema is an object with one property per parameter (required unless it has a
    default, no additional properties). Supported annotations: ``str``, ``int``, ``float``,
    ``bool``, ``None``, ``list``, ``dict``, ``tuple``, ``Literal``, ``Enum``, optional
    unions, dataclasses, ``typing_extensions.TypedDict``, pydantic models, and
    ``Annotated[..., pydantic.Field(...)]`` constraints (length, range, pattern).

    A ``str`` result becomes text output; a ``ToolOutput`` passes through; anything else is
    encoded as JSON details. An exception from the function passes through unchanged. A sync
    function runs in a worker thread (with the caller's context variables) so it never
    blocks the event loop.

    Raises:
        InvalidToolError: ``fn`` is not callable, a parameter cannot be described by a
            schema, or the name or description is invalid.
    """

    __slots__ = ("_declared", "_definition", "_fields", "_fn", "_is_async", "_model", "_validator")

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        if fn is None or not callable(fn):
            raise InvalidToolError.because("function is nil")
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        if description is None:
            description = inspect.getdoc(fn) or ""
        model = _arguments_model(fn, str(tool_name))
        schema = _derive_schema(model, str(tool_name))
        try:
            definition = ToolDefinition(tool_name, schema, description)
        except InvalidToolError as exc:
            raise InvalidToolError.because(f"definition: {exc}") from None
        self._fn = fn
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
        )
        self._model = model
        # The parameters, in the model's order, read once (pydantic's class attribute
        # ``model_fields`` is a descriptor that builds its answer on each read).
        self._fields = tuple(model.model_fields)
        self._definition = definition
        self._declared = _declared_names(schema)
        self._validator = _strict_decoder(model, self._declared)

    def definition(self) -> ToolDefinition:
        """The derived definition (immutable)."""
        return self._definition

    def input_validator(self) -> InputValidator:
        """The strict decoder, independent of this Func and its function."""
        return self._validator

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Decode the arguments strictly, run the function, encode its result.

        Raises:
            InvalidToolError: ``invocation`` is not an Invocation.
            ValueError: the arguments do not decode (only reachable when admission was
                bypassed).
            InvalidToolOutputError: the result cannot be encoded as JSON.
        """
        if not isinstance(invocation, Invocation):
            raise InvalidToolError.because("expected an Invocation")
        try:
            decoded = _decode(self._model, invocation.arguments, self._declared)
        except ValueError as exc:
            raise ValueError(f"tool: decode function arguments: {exc}") from None
        kwargs = {field: getattr(decoded, field) for field in self._fields}
        if self._is_async:
            result = await self._fn(**kwargs)
        else:
            result = await asyncio.to_thread(self._fn, **kwargs)
        return _encode_result(result)

    def __repr__(self) -> str:
        return f"Func(name={self._definition.name!r})"


@overload
def function_tool(fn: Callable[..., Any], /) -> Func: ...


@overload
def function_tool(
    fn: None = None, /, *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Func]: ...


def function_tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Func | Callable[[Callable[..., Any]], Func]:
    """Turn a typed function into a :class:`Func`; usable bare or as ``@function_tool(...)``.

    The name defaults to the function's ``__name__`` and the description to its docstring.
    """
    if fn is not None:
        return Func(fn, name=name, description=description)
    return functools.partial(Func, name=name, description=description)
