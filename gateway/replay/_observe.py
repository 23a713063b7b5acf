"""Seeing each decision with its full input: the observed authorizer and the decision tap.

:class:`ObservedAuthorizer` wraps the enforced policy authorizer where it sees exactly the
caller context the policy sees; it notes the input document and the outcome of the
current authorization (in a context variable, never on the decision). The audit trail
then writes the decision record, which is where the decision gets its id: the
:class:`DecisionTap`, an :class:`gateway.audit.AuditSink` in front of the real sink, takes
that note as the record passes and hands the pair to the replay capture and to shadow
evaluation. Neither can change or delay the record, and neither can fail the call.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gateway import Authorization, Authorizer, Decision
from gateway.audit import AuditSink
from gateway.policy import InputDocument, PathView, current_caller
from gateway.replay._capture import ReplayCapture
from gateway.replay._outcome import Outcome, of_error, of_result

if TYPE_CHECKING:
    from gateway.replay._shadow import ShadowEvaluator

_LOG: Final = logging.getLogger("gateway.replay")


@dataclass(frozen=True, slots=True)
class Observation:
    """One authorization as the enforced policy saw it.

    Attributes:
        document: the input document (tool, arguments, facts, caller context).
        recorded: what the enforced authorizer answered.
    """

    document: InputDocument
    recorded: Outcome

    @property
    def tool(self) -> str:
        """The tool's name."""
        return self.document.definition.name

    def roles(self) -> tuple[str, ...] | None:
        """The caller context's ``roles``, when it is a list of strings."""
        roles = self.document.context.as_dict().get("roles")
        if isinstance(roles, list) and all(isinstance(role, str) for role in roles):
            return tuple(roles)
        return None

    def arguments_digest(self) -> str | None:
        """The digest the audit record carries for these arguments."""
        try:
            return hashlib.sha256(self.document.canonical_arguments).hexdigest()
        except Exception:  # noqa: BLE001 - unreadable arguments match no record
            return None


_OBSERVED: contextvars.ContextVar[Observation | None] = contextvars.ContextVar(
    "gateway_replay_observed", default=None
)


class ObservedAuthorizer:
    """Asks ``inner`` and notes the input document and the outcome for the decision tap.

    Place it directly around the enforced policy authorizer, inside the audit trail's
    authorizer, so that it sees the caller context the policy sees.

    Args:
        inner: the enforced authorizer; its answer is returned (or raised) unchanged.
        path_view: the same path view the policy authorizer resolves path facts with.
    """

    def __init__(self, inner: Authorizer, *, path_view: PathView | None = None) -> None:
        self._inner = inner
        self._path_view = path_view

    @property
    def inner(self) -> Authorizer:
        """The enforced authorizer."""
        return self._inner

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        """The inner answer, unchanged; noted with its input document."""
        document = InputDocument(authorization, current_caller(), path_view=self._path_view)
        try:
            result = await self._inner.authorize(authorization)
        except Exception as exc:
            _OBSERVED.set(Observation(document, of_error(exc)))
            raise
        _OBSERVED.set(Observation(document, of_result(result)))
        return result


def take_observation() -> Observation | None:
    """The note of the current authorization, removed (each note is taken once)."""
    observation = _OBSERVED.get()
    if observation is not None:
        _OBSERVED.set(None)
    return observation


class DecisionTap:
    """An audit sink that passes every record to ``sink`` and taps the decision records.

    For each decision record, the note :class:`ObservedAuthorizer` left for it (same tool,
    same argument digest) goes to the capture (``capture``) and to shadow evaluation
    (``shadow``), linked by the record's decision id. A record without a matching note is
    counted (:attr:`unobserved`) and passed on as it is.
    """

    def __init__(
        self,
        sink: AuditSink,
        *,
        capture: ReplayCapture | None = None,
        shadow: ShadowEvaluator | None = None,
    ) -> None:
        self._sink = sink
        self._capture = capture
        self._shadow = shadow
        self.unobserved = 0
        self.failed = 0

    @property
    def sink(self) -> AuditSink:
        """The sink records go to."""
        return self._sink

    def submit(self, record: Mapping[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        """Pass the record on; tap it if it is a decision record."""
        future = self._sink.submit(record)
        if record.get("type") == "decision":
            observation = take_observation()
            try:
                self._tap(record, observation)
            except Exception as exc:  # noqa: BLE001 - the tap never fails the call
                self.failed += 1
                _LOG.warning("replay tap failed (%s)", type(exc).__name__)
        return future

    def _tap(self, record: Mapping[str, Any], observation: Observation | None) -> None:
        decision_id = record.get("decision_id")
        if (
            observation is None
            or not isinstance(decision_id, str)
            or record.get("tool") != observation.tool
            or record.get("arguments_digest") != observation.arguments_digest()
        ):
            self.unobserved += 1
            return
        if self._capture is not None:
            # Encoded as the decision is recorded: the facts (path facts resolve on the
            # filesystem) are fixed here, for the capture and the shadow candidate alike.
            # Without a capture nothing is encoded here: the candidate's engine encodes the
            # document off this call's path (an embedded candidate on its own threads).
            self._capture.record(
                decision_id,
                observation.document.to_json(),
                tool=observation.tool,
                roles=observation.roles(),
                recorded=observation.recorded,
            )
        if self._shadow is not None:
            self._shadow.submit(decision_id, observation)

    def close(self) -> None:
        """Close the sink and the capture."""
        try:
            self._sink.close()
        finally:
            if self._capture is not None:
                self._capture.close()
