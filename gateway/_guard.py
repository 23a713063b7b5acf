"""Guard: authorization at the universal Tool.call boundary, failing closed."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

from gateway._authorization import (
    Authorization,
    AuthorizationError,
    Authorizer,
    admitted_authorization,
    read_answer,
)
from gateway._contract import Invocation, Tool, decoding_of, readmit
from gateway._definition import ToolDefinition
from gateway._errors import InvalidInvocationError, InvalidToolError, MalformedDecisionError
from gateway._failure import Failure, FailureKind
from gateway._output import ToolOutput
from gateway.obligations import (
    RedactOutput,
    RewriteArguments,
    UnfulfilledObligationError,
    redact_output,
    rewrite_arguments,
)

_T = TypeVar("_T")

_REFUSAL: Final = 'error: tool "{name}" is not authorized'


class Guard:
    """Runs the inner tool only after an explicit allow from the authorizer.

    Both collaborators are required and keyword-only: a guard built without an authorizer
    would report as protected while permitting everything. The inner ``definition()`` is
    called exactly once, here; the guard hands out that snapshot and unwraps to the inner
    tool, so capabilities (the input validator) resolve through it.

    ``call`` does, in order: refuse to start if the task is already being cancelled; ask the
    authorizer with a fresh :class:`Authorization`; propagate a cancellation that arrived
    during the decision, whatever the authorizer answered or raised; seal any exception or
    malformed answer in :class:`AuthorizationError`; raise ``Failure(REJECTED)`` on a
    refusal (the decision's public ``message``, or ``error: tool "<name>" is not
    authorized``); otherwise fulfil the decision's obligations (see
    :mod:`gateway.obligations`) and run the inner tool. Without obligations the tool runs on
    the same invocation and its result is returned unchanged. ``rewrite_arguments`` runs the
    tool on the rewritten arguments only, admitted again by the same contract;
    ``redact_output`` redacts the output (a Failure's public output too). Any other
    obligation left on the decision (an unknown type, an approval or audit fields nobody
    took care of) cannot be fulfilled here: the call is refused with an
    :class:`AuthorizationError` of code ``obligation_unfulfilled``, and so is a rewrite that
    cannot be carried out or whose result the contract refuses.
    ``asyncio.CancelledError`` always propagates unchanged and is never sealed.

    Raises:
        InvalidToolError: the authorizer (checked first) or the tool is missing, or the
            inner definition is invalid.
    """

    __slots__ = ("_authorizer", "_definition", "_tool")

    def __init__(self, *, tool: Tool, authorizer: Authorizer) -> None:
        if authorizer is None:
            raise InvalidToolError.because("authorizer is nil")
        if not isinstance(authorizer, Authorizer):
            raise InvalidToolError.because(
                "authorizer must have an async authorize() method "
                "(wrap plain functions in AuthorizerFunc)"
            )
        if tool is None or not isinstance(tool, Tool):
            raise InvalidToolError.because("authorization guard tool is nil")
        try:
            definition = tool.definition()
        except Exception as exc:
            raise InvalidToolError.because(f"authorization guard definition: {exc}") from exc
        if not isinstance(definition, ToolDefinition):
            raise InvalidToolError.because("authorization guard definition: not a ToolDefinition")
        self._tool = tool
        self._authorizer = authorizer
        self._definition = definition

    def definition(self) -> ToolDefinition:
        """The snapshot taken at construction; the inner tool is never consulted again."""
        return self._definition

    def unwrap(self) -> Tool:
        """The inner tool."""
        return self._tool

    @property
    def authorizer(self) -> Authorizer:
        """The authorizer every call is checked against."""
        return self._authorizer

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Authorize, then run the inner tool only on an explicit allow.

        Raises:
            asyncio.CancelledError: the task was cancelled before or during the decision.
            AuthorizationError: no decision (the cause is sealed).
            Failure: the policy refused (kind ``rejected``, no cause).
        """
        # The task is looked up once: a coroutine runs in one task from start to end.
        task = asyncio.current_task()
        if task is not None and task.cancelling() > 0:
            raise asyncio.CancelledError
        definition = self._definition
        # Made from an Invocation, it carries admission's decoding of the arguments: the
        # policy input and the audit record do not decode them again.
        authorization = (
            admitted_authorization(definition, decoding_of(invocation))
            if type(invocation) is Invocation
            else Authorization(definition, invocation.arguments)
        )
        cause: Exception | None = None
        result: object = None
        try:
            result = await self._authorizer.authorize(authorization)
        except Exception as exc:  # noqa: BLE001 - every policy error is "no decision"
            cause = exc
        # A cancellation requested while the policy ran wins over whatever the policy
        # answered or raised (it may have swallowed the CancelledError): a cancellation
        # never becomes an AuthorizationError or a Failure.
        if task is not None and task.cancelling() > 0:
            raise asyncio.CancelledError
        if cause is None:
            try:
                decision = read_answer(result)
            except MalformedDecisionError as exc:
                cause = exc
        # Raised outside the except blocks so that nothing is chained into __context__.
        if cause is not None:
            raise AuthorizationError(definition.name, cause)
        if decision.allowed is not True:
            message = decision.message or _REFUSAL.format(name=definition.name)
            raise Failure(FailureKind.REJECTED, message)
        if not decision.obligations:
            return await self._tool.call(invocation)
        return await self._fulfil(invocation, decision.obligations)

    async def _fulfil(self, invocation: Invocation, obligations: tuple[object, ...]) -> ToolOutput:
        name = self._definition.name
        rewrites = tuple(o for o in obligations if isinstance(o, RewriteArguments))
        redactions = tuple(o for o in obligations if isinstance(o, RedactOutput))
        if len(rewrites) + len(redactions) != len(obligations):
            other = next(
                o for o in obligations if not isinstance(o, RewriteArguments | RedactOutput)
            )
            kind = getattr(other, "type", type(other).__name__)
            raise AuthorizationError(
                name, UnfulfilledObligationError(f"obligation {kind!r} cannot be fulfilled")
            )
        if rewrites:
            cause: Exception | None = None
            try:
                invocation = readmit(invocation, rewrite_arguments(invocation.arguments, rewrites))
            except UnfulfilledObligationError as exc:
                cause = exc
            except InvalidInvocationError:
                cause = UnfulfilledObligationError(
                    "rewrite_arguments: the rewritten arguments are not admitted by the contract"
                )
            if cause is not None:
                raise AuthorizationError(name, cause)
        failed: Failure | None = None
        try:
            output = await self._tool.call(invocation)
        except Failure as failure:
            if not redactions:
                raise
            failed = failure
        if failed is not None:
            # Raised outside the except block: nothing is chained into __context__.
            public = redact_output(failed.output, redactions)
            raise Failure(failed.kind, public, failed.cause)
        return redact_output(output, redactions)

    def __repr__(self) -> str:
        return f"Guard(tool={self._definition.name!r}, authorizer={self._authorizer!r})"


def run_blocking(awaitable: Coroutine[Any, Any, _T]) -> _T:
    """Run one gateway coroutine to completion from code that is not async.

    The same async code path runs underneath, in a fresh event loop, with the caller's
    context variables (caller context included). Use ``await`` instead inside a running
    event loop.

    Raises:
        RuntimeError: called from a thread whose event loop is running.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    awaitable.close()
    raise RuntimeError("run_blocking() cannot be called from a running event loop; use await")
