"""The trust boundary: Tool, its optional capabilities, bind, Binding, Contract, Invocation.

An untrusted ToolCall becomes executable only through ``Contract.prepare``, which checks it
against a definition frozen at bind time. The contract keeps no reference to the executable
tool, so it can be handed to admission code (or outlive the tool) without granting
execution. A tool's optional capabilities (its input validator) resolve through decorator
(wrapping) chains, outermost declaration first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar, runtime_checkable

from gateway import _json, _schema
from gateway._call import ToolCall, decoded_arguments, parsed_arguments
from gateway._definition import ToolDefinition
from gateway._errors import InvalidInvocationError, InvalidToolError, InvalidWrappingChainError
from gateway._output import ToolOutput

#: The most ``unwrap()`` steps a capability lookup takes; cycles end here.
MAX_WRAPPING_DEPTH: Final = 64

InputValidator = Callable[[bytes], None]
_T = TypeVar("_T")


@runtime_checkable
class Tool(Protocol):
    """The minimal executable capability.

    ``definition()`` returns a valid, immutable definition safe to show to a model. ``call``
    receives only an Invocation promoted by the tool's exact frozen Contract; it owns any
    semantic validation beyond the schema, must honour cancellation, and must not retain the
    invocation. Ordinary failures are raised; :class:`gateway.Failure` carries a complete
    unsuccessful outcome with public output.
    """

    def definition(self) -> ToolDefinition:
        """Return the model-visible definition."""
        ...

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Execute one admitted invocation."""
        ...


@runtime_checkable
class WrappingTool(Protocol):
    """A decorator that stands in for another tool.

    ``unwrap()`` must return the same inner tool for the wrapper's lifetime and do no I/O.
    Optional capabilities resolve through the chain, outermost declaration first.
    """

    def unwrap(self) -> Tool:
        """Return the next inner tool."""
        ...


@runtime_checkable
class InputValidatingTool(Protocol):
    """A tool with admission rules that JSON Schema cannot express.

    ``input_validator()`` is called once, at bind. The returned callable must not retain the
    executable tool, must be deterministic, bounded, free of side effects and safe for
    concurrent use, and must neither mutate nor keep its argument. It raises to refuse.
    ``None`` means the schema is the complete admission contract.
    """

    def input_validator(self) -> InputValidator | None:
        """Return the independent validator, or ``None``."""
        ...


def capability(tool: object, protocol: type[_T]) -> _T | None:
    """Find the outermost node of ``tool``'s wrapping chain that implements ``protocol``.

    Returns ``None`` when a node is ``None`` or a non-wrapper that does not implement it.

    Raises:
        InvalidWrappingChainError: more than ``MAX_WRAPPING_DEPTH`` wrappers without a match
            (which is how a cycle ends).
    """
    node = tool
    depth = 0
    while node is not None:
        if isinstance(node, protocol):
            return node
        if not isinstance(node, WrappingTool):
            return None
        if depth == MAX_WRAPPING_DEPTH:
            raise InvalidWrappingChainError.because(
                f"{type(tool).__name__} exceeds {MAX_WRAPPING_DEPTH} wrappers"
            )
        node = node.unwrap()
        depth += 1
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionLimits:
    """Bounds on untrusted argument documents, enforced by ``Contract.prepare``.

    Attributes:
        max_argument_bytes: the largest accepted argument document (default 1 MiB).
        max_depth: the deepest accepted container nesting (default 64).
    """

    max_argument_bytes: int = _json.DEFAULT_MAX_ARGUMENT_BYTES
    max_depth: int = _json.DEFAULT_MAX_DEPTH

    def __post_init__(self) -> None:
        if self.max_argument_bytes < 2 or self.max_depth < 1:
            raise InvalidToolError.because("admission limits are too small")


DEFAULT_LIMITS: Final = AdmissionLimits()


class _ContractState:
    # The frozen identity every Invocation is checked against. Deliberately holds no tool.
    __slots__ = ("definition", "limits", "schema", "valid", "valid_bytes", "validator")

    def __init__(
        self,
        definition: ToolDefinition,
        schema: _schema.CompiledSchema,
        validator: InputValidator | None,
        limits: AdmissionLimits,
    ) -> None:
        self.definition = definition
        self.schema = schema
        self.validator = validator
        self.limits = limits
        # Argument documents (their exact bytes, small ones) that satisfied the schema:
        # agents repeat them, and the same bytes always decode to the same value, so the
        # schema is not asked again. Only a pass is remembered; bounded in entries and in
        # bytes per contract (emptied when full), so many tools cannot hold much memory.
        self.valid: dict[bytes, None] = {}
        self.valid_bytes = 0

    def satisfies_schema(self, raw: bytes, value: _json.JSONValue) -> None:
        """Validate ``value`` (decoded from ``raw``) against the schema, remembering a pass.

        Raises:
            ValueError: the schema refuses it (see ``CompiledSchema.validate``).
        """
        if raw in self.valid:
            return
        self.schema.validate(value)
        if len(raw) <= _SCHEMA_MEMO_MAX_BYTES:
            if (
                len(self.valid) >= _SCHEMA_MEMO_ENTRIES
                or self.valid_bytes + len(raw) > _SCHEMA_MEMO_BUDGET_BYTES
            ):
                self.valid.clear()
                self.valid_bytes = 0
            self.valid[raw] = None
            self.valid_bytes += len(raw)


#: How many argument documents that satisfied a tool's schema are remembered, and how large.
_SCHEMA_MEMO_ENTRIES: Final = 1024
_SCHEMA_MEMO_MAX_BYTES: Final = 4096
#: The most bytes of remembered documents one contract holds (a few hundred typical calls).
_SCHEMA_MEMO_BUDGET_BYTES: Final = 64 * 1024


_TOKEN: Final = object()


class ValueFreeRefusalError(ValueError):
    """An input validator's refusal whose message is known never to quote a value.

    Only such a refusal's message reaches the caller; any other exception from an input
    validator is refused with a fixed message (it is kept as ``__cause__``, for the tool's
    own diagnostics), since its text may quote the arguments.
    """


class Invocation:
    """A complete JSON object admitted by one exact frozen contract.

    Only :meth:`Contract.prepare` can make one. ``arguments`` are the verbatim validated
    bytes (``b"{}"`` for blank input); bytes are immutable, so nothing handed out can change
    the invocation.
    """

    __slots__ = ("_arguments", "_call_id", "_decoded", "_state")

    def __init__(
        self,
        token: object,
        state: _ContractState,
        arguments: bytes,
        call_id: str,
        decoded: _json.Decoded,
    ):
        if token is not _TOKEN:
            raise InvalidInvocationError.because("only Contract.prepare creates invocations")
        self._state = state
        self._arguments = arguments
        self._call_id = call_id
        # The strict decoding admission made of ``arguments``: the policy input, the cache
        # and the audit trail read it instead of decoding the bytes again.
        self._decoded = decoded

    @property
    def arguments(self) -> bytes:
        """The admitted argument document, byte for byte."""
        return self._arguments

    @property
    def call_id(self) -> str:
        """The id of the ToolCall this invocation was prepared from."""
        return self._call_id

    @property
    def tool_name(self) -> str:
        """The name of the tool whose contract admitted this invocation."""
        return self._state.definition.name

    def __repr__(self) -> str:
        return f"Invocation(tool={self.tool_name!r}, call_id={self._call_id!r})"


class Contract:
    """The immutable trust boundary between an untrusted ToolCall and an Invocation.

    It holds the frozen definition, the compiled schema and the independent input validator,
    and never the executable tool. Safe for concurrent use.
    """

    __slots__ = ("_state",)

    def __init__(self, token: object, state: _ContractState) -> None:
        if token is not _TOKEN:
            raise InvalidToolError.because("contracts are made by bind()")
        self._state = state

    @property
    def definition(self) -> ToolDefinition:
        """The frozen definition (immutable)."""
        return self._state.definition

    @property
    def limits(self) -> AdmissionLimits:
        """The admission bounds in force."""
        return self._state.limits

    def prepare(self, call: ToolCall) -> Invocation:
        """Admit an untrusted call, or refuse it. Never calls the tool or any policy.

        Checks, in order: the call's own fields (id, then name), the exact tool name, the size
        bound, blank arguments (normalized to ``{}``), strict JSON (RFC 7493) within the
        depth bound, the JSON Schema, then the tool's own input validator.

        No refusal message quotes an argument value: a schema refusal names the JSON
        pointer and the keyword, a strict JSON refusal what is wrong and where, and an input
        validator's own text is shown only from a :class:`ValueFreeRefusalError`.

        Raises:
            InvalidInvocationError: for any refusal, whatever the input; a validator's own
                exception is kept as ``__cause__``.
        """
        if not isinstance(call, ToolCall):
            raise InvalidInvocationError.because("expected a ToolCall")
        try:
            call.validate()
        except InvalidInvocationError as exc:
            raise InvalidInvocationError.because(str(exc)) from None
        state = self._state
        want = state.definition.name
        if call.name != want:
            raise InvalidInvocationError.because(
                f"call name {call.name!r} does not match bound tool {want!r}"
            )
        raw = call.arguments
        if isinstance(raw, str):
            try:
                raw = raw.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInvocationError.because(
                    "arguments: value must be one valid RFC 7493 JSON document"
                ) from None
        else:
            raw = bytes(raw)
        limit = state.limits.max_argument_bytes
        if len(raw) > limit:
            raise InvalidInvocationError.because(f"arguments: document exceeds {limit} bytes")
        if _json.is_blank(raw):
            raw = b"{}"
        try:
            decoding = _decode(call, raw, state.limits.max_depth)
            # What the policy is shown is what the tool will read (see check_doubles).
            _json.check_doubles(decoding.value, raw)
        except _json.StrictJSONError as exc:
            raise InvalidInvocationError.because(
                f"arguments: value must be one valid RFC 7493 JSON document ({exc})"
            ) from None
        try:
            state.satisfies_schema(raw, decoding.value)
        except Exception as exc:  # noqa: BLE001 - any validator failure (even a decimal error) refuses
            raise InvalidInvocationError.because(f"arguments: {exc}") from None
        if state.validator is not None:
            _run_validator(state.validator, decoding)
        return Invocation(_TOKEN, state, raw, call.id, decoding)


def readmit(invocation: Invocation, arguments: bytes) -> Invocation:
    """The same call with other arguments, admitted again by the contract that admitted it.

    For an obligation that rewrites a call's arguments: the rewritten document goes through
    the full admission (size, strict JSON, schema, the tool's input validator).

    Raises:
        InvalidInvocationError: the arguments are refused.
    """
    if not isinstance(invocation, Invocation):
        raise InvalidInvocationError.because("expected an Invocation")
    state = invocation._state  # noqa: SLF001 - this module's own class
    contract = Contract(_TOKEN, state)
    return contract.prepare(ToolCall(invocation.call_id, state.definition.name, arguments))


def decoding_of(invocation: Invocation) -> _json.Decoded:
    """The strict decoding admission made of ``invocation.arguments``."""
    return invocation._decoded  # noqa: SLF001 - this module's own class


class DecodingValidator:
    """An input validator that can also be handed admission's decoding of the bytes.

    For a validator that admits the arguments again through another contract (a registry's
    binding): :meth:`validate_decoded` lets that admission reuse the decoding instead of
    decoding the same bytes again. Called as a plain validator, it gets the bytes alone.
    """

    def __call__(self, raw: bytes) -> None:
        """Validate the admitted bytes (the plain :data:`InputValidator` protocol)."""
        raise NotImplementedError

    def validate_decoded(self, decoded: _json.Decoded) -> None:
        """Validate ``decoded.source``, decoded as ``decoded.value`` (default: the bytes)."""
        self(decoded.source)


def _decode(call: ToolCall, raw: bytes, max_depth: int) -> _json.Decoded:
    carried = decoded_arguments(call)
    if carried is not None and carried.source is raw:
        # Admitted by another contract, decoded there: only this contract's depth bound
        # is left to check, and the same decoding (its canonical form too) goes on.
        _json.check_depth(carried.value, max_depth)
        return carried
    parsed = parsed_arguments(call)
    if parsed is None or parsed.canonical is not raw:
        return _json.decoded(raw, _json.parse(raw, max_depth=max_depth))
    # Decoded strictly by the surface, and ``raw`` is its canonical encoding: only this
    # contract's depth bound is left to check.
    _json.check_depth(parsed.value, max_depth)
    return _json.decoded(raw, parsed.value, is_canonical=True)


def _run_validator(validator: InputValidator, decoding: _json.Decoded) -> None:
    try:
        if isinstance(validator, DecodingValidator):
            validator.validate_decoded(decoding)
        else:
            validator(decoding.source)
    except ValueFreeRefusalError as exc:
        raise InvalidInvocationError.because(f"arguments: {exc}") from exc
    except Exception as exc:
        raise InvalidInvocationError.because(
            "arguments: refused by the tool's input validator"
        ) from exc


class Binding:
    """One immutable Contract with the Tool that executes it.

    Copies share the contract identity; calls may run concurrently when the tool allows.
    """

    __slots__ = ("_contract", "_tool")

    def __init__(self, token: object, contract: Contract, tool: Tool) -> None:
        if token is not _TOKEN:
            raise InvalidToolError.because("bindings are made by bind()")
        self._contract = contract
        self._tool = tool

    @property
    def contract(self) -> Contract:
        """The exact frozen contract; keeping it does not keep the tool alive."""
        return self._contract

    @property
    def definition(self) -> ToolDefinition:
        """Shorthand for ``contract.definition``."""
        return self._contract.definition

    def prepare(self, call: ToolCall) -> Invocation:
        """Shorthand for ``contract.prepare(call)``."""
        return self._contract.prepare(call)

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Run the tool on an invocation prepared by this binding's contract.

        The tool's result and exceptions pass through unchanged.

        Raises:
            InvalidInvocationError: the invocation belongs to another contract (even of an
                identical tool); the tool does not run.
        """
        # Contract identity is deliberately private to this module; nothing else can read it.
        owner = invocation._state if isinstance(invocation, Invocation) else None  # noqa: SLF001
        if owner is not self._contract._state:  # noqa: SLF001
            raise InvalidInvocationError.because("invocation does not belong to binding")
        return await self._tool.call(invocation)

    def __repr__(self) -> str:
        return f"Binding(tool={self._contract.definition.name!r})"


def bind(tool: Tool, *, limits: AdmissionLimits = DEFAULT_LIMITS) -> Binding:
    """Freeze a tool's contract and pair it with the tool.

    Calls ``tool.definition()`` exactly once, compiles its input schema, and resolves the
    input validator declaration through the wrapping chain (outermost declaration wins).

    Raises:
        InvalidToolError: ``tool`` is None or not a Tool, its definition is invalid or could
            not be produced, its schema does not compile, or its validator declaration
            fails (including an invalid wrapping chain).
    """
    if tool is None or not isinstance(tool, Tool):
        raise InvalidToolError.because("tool is nil")
    if not isinstance(limits, AdmissionLimits):
        raise InvalidToolError.because("limits must be AdmissionLimits")
    try:
        definition = tool.definition()
    except Exception as exc:
        raise InvalidToolError.because(f"definition: {exc}") from exc
    if not isinstance(definition, ToolDefinition):
        raise InvalidToolError.because("definition() must return a ToolDefinition")
    try:
        schema = _schema.compile_schema(definition.input_schema_json)
    except _schema.SchemaError as exc:
        raise InvalidToolError.because(f"input schema: jsonschema: invalid schema: {exc}") from None
    try:
        # mypy refuses protocol classes as type[T]; runtime_checkable makes this sound.
        declaring = capability(tool, InputValidatingTool)  # type: ignore[type-abstract]
        validator = None if declaring is None else declaring.input_validator()
    except Exception as exc:
        raise InvalidToolError.because(f"input validation: {exc}") from exc
    if validator is not None and not callable(validator):
        raise InvalidToolError.because("input validation: validator is not callable")
    state = _ContractState(definition, schema, validator, limits)
    return Binding(_TOKEN, Contract(_TOKEN, state), tool)
