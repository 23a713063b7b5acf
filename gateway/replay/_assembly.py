"""Putting the capture and shadow evaluation into a service: one call for the builder.

:func:`assemble` takes the enforced policy authorizer, the audit sink and the settings of
``[replay]`` and ``[shadow]``, and returns what the service uses instead (the observed
authorizer, the tapping sink) and what it must open, count and close.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway import Authorizer
from gateway.audit import AuditSink
from gateway.policy import EmbeddedEngine, OpaRestEngine, PathView
from gateway.replay._capture import ReplayCapture
from gateway.replay._metrics import ReplayCollector
from gateway.replay._observe import DecisionTap, ObservedAuthorizer
from gateway.replay._settings import (
    ReplaySettings,
    SettingsError,
    ShadowSettings,
    build_candidate,
)
from gateway.replay._shadow import ShadowEvaluator


@dataclass(slots=True)
class Assembly:
    """The pieces :func:`assemble` made.

    Attributes:
        authorizer: the authorizer to decide with (the enforced one, observed).
        sink: the sink for the audit trail (the real one, tapped).
        capture: the capture, if on.
        shadow: the shadow evaluator, if on.
        collector: their Prometheus counters (register it on the service's registry).
    """

    authorizer: Authorizer
    sink: AuditSink
    capture: ReplayCapture | None
    shadow: ShadowEvaluator | None
    collector: ReplayCollector

    async def open(self) -> None:
        """Open the candidate's connection (an OPA server candidate)."""
        if self.shadow is not None and isinstance(self.shadow.engine, OpaRestEngine):
            await self.shadow.engine.open()

    async def close(self) -> None:
        """Stop shadow evaluation and close the candidate and the capture."""
        if self.shadow is not None:
            await self.shadow.aclose()
            engine = self.shadow.engine
            if isinstance(engine, OpaRestEngine):
                await engine.close()
            elif isinstance(engine, EmbeddedEngine):
                engine.close()
        if self.capture is not None:
            self.capture.close()


def assemble(
    authorizer: Authorizer,
    sink: AuditSink | None,
    *,
    replay: ReplaySettings | None,
    shadow: ShadowSettings | None,
    path_view: PathView | None = None,
) -> Assembly | None:
    """The capture and shadow evaluation the settings ask for (``None`` when neither).

    Raises:
        SettingsError: either is on without an audit trail, or the candidate does not load.
        OSError: the capture folder or file cannot be made.
    """
    if replay is None and shadow is None:
        return None
    if sink is None:
        key = "replay.capture" if replay is not None else "shadow.enabled"
        raise SettingsError(f"{key}: needs the audit trail ([audit] enabled)")
    capture = ReplayCapture(replay.capture_dir, replay.keyring) if replay is not None else None
    evaluator = None
    if shadow is not None:
        evaluator = ShadowEvaluator(
            build_candidate(shadow),
            path=shadow.decision_path,
            record=sink.submit,
            queue_size=shadow.queue_size,
            workers=shadow.workers,
            budget_s=shadow.budget_s,
        )
    tap = DecisionTap(sink, capture=capture, shadow=evaluator)
    return Assembly(
        authorizer=ObservedAuthorizer(authorizer, path_view=path_view),
        sink=tap,
        capture=capture,
        shadow=evaluator,
        collector=ReplayCollector(shadow=evaluator, capture=capture, tap=tap),
    )
