"""Shadow evaluation: a candidate policy decides every call too, and never changes it.

The enforced decision is made, recorded and answered first; the decision tap then hands the
call's input document to :meth:`ShadowEvaluator.submit`, which only puts it on a bounded
queue (never waits: when the queue is full the evaluation is dropped and counted). Worker
tasks evaluate the candidate engine on that same document, each evaluation under a time
budget; a disagreement (a flip, a changed message or reasons) becomes an audit record of
type ``shadow`` linked by decision id, and a count. A failing candidate, a full queue or
an audit write that fails is counted and logged, and never reaches a call.

A candidate that fails to decide is an ``error`` outcome, as it would be if enforced
(fail closed): ``allow-to-error`` is a disagreement. Running out of the budget is not a
decision of the candidate: it is counted as ``timed_out`` and not recorded.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gateway.policy import DEFAULT_DECISION_PATH, PolicyEngine, normalize_path
from gateway.replay._observe import Observation
from gateway.replay._outcome import Outcome, change, decide

_LOG: Final = logging.getLogger("gateway.replay")

#: How many calls may wait for shadow evaluation before more are dropped.
DEFAULT_QUEUE_SIZE: Final = 1024
#: How long one shadow evaluation may take (seconds).
DEFAULT_BUDGET_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class ShadowStats:
    """Counters since the evaluator was made.

    Attributes:
        submitted: calls handed to shadow evaluation.
        dropped: of those, dropped because the queue was full (or no loop ran).
        evaluated: candidate evaluations finished.
        agreed: of those, the ones that agreed with the enforced outcome.
        disagreed: of those, the disagreements by change (``deny-to-allow``, ``message``, ...).
        timed_out: evaluations that ran out of the budget (not recorded).
        failed: evaluations or audit records that failed in the shadow machinery itself.
    """

    submitted: int
    dropped: int
    evaluated: int
    agreed: int
    disagreed: Mapping[str, int]
    timed_out: int
    failed: int


@dataclass(frozen=True, slots=True)
class _Job:
    decision_id: str
    observation: Observation


def _utc(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(timespec="microseconds")


class ShadowEvaluator:
    """Evaluates a candidate engine after each enforced decision (see the module docstring).

    Args:
        engine: the candidate engine (a second bundle, policy folder or OPA server).
        path: the candidate's decision path.
        record: where disagreement records go (the audit sink's ``submit``); each returns
            a future, whose failure is counted.
        queue_size: the most calls waiting; more are dropped and counted.
        workers: concurrent candidate evaluations.
        budget_s: the longest one candidate evaluation may take.
        on_result: called with ``(tool, change or None)`` after every evaluation (metrics).
        wall_clock: seconds since the epoch, for record timestamps.
    """

    def __init__(
        self,
        engine: PolicyEngine,
        *,
        path: str = DEFAULT_DECISION_PATH,
        record: Callable[[dict[str, Any]], Any] | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        workers: int = 1,
        budget_s: float = DEFAULT_BUDGET_S,
        on_result: Callable[[str, str | None], None] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if queue_size < 1 or workers < 1 or not budget_s > 0:
            raise ValueError("queue_size and workers must be >= 1 and budget_s positive")
        self._engine = engine
        self._path = normalize_path(path)
        self._record = record
        self._queue_size = queue_size
        self._workers = workers
        self._budget_s = float(budget_s)
        self._on_result = on_result
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Job] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._submitted = 0
        self._dropped = 0
        self._evaluated = 0
        self._agreed = 0
        self._disagreed: collections.Counter[str] = collections.Counter()
        self._timed_out = 0
        self._failed = 0

    @property
    def engine(self) -> PolicyEngine:
        """The candidate engine."""
        return self._engine

    def stats(self) -> ShadowStats:
        """A snapshot of the counters."""
        with self._lock:
            return ShadowStats(
                submitted=self._submitted,
                dropped=self._dropped,
                evaluated=self._evaluated,
                agreed=self._agreed,
                disagreed=dict(self._disagreed),
                timed_out=self._timed_out,
                failed=self._failed,
            )

    def _started_queue(self) -> asyncio.Queue[_Job] | None:
        # The queue and workers of the running loop, started on first use.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        if self._closed:
            return None
        if self._loop is not loop or self._queue is None:
            self._loop = loop
            self._queue = asyncio.Queue(maxsize=self._queue_size)
            # A fresh context: the workers carry nothing of the call that started them.
            self._tasks = [
                loop.create_task(
                    self._work(self._queue), name="gateway-shadow", context=contextvars.Context()
                )
                for _ in range(self._workers)
            ]
        return self._queue

    def submit(self, decision_id: str, observation: Observation) -> bool:
        """Queue one call for shadow evaluation without waiting; ``False`` when dropped."""
        with self._lock:
            self._submitted += 1
        queue = self._started_queue()
        if queue is not None:
            try:
                queue.put_nowait(_Job(decision_id, observation))
            except asyncio.QueueFull:
                pass
            else:
                return True
        with self._lock:
            self._dropped += 1
        return False

    async def drain(self) -> None:
        """Wait until every queued evaluation of this loop has finished (for tests, shutdown)."""
        queue = self._queue
        if queue is not None and self._loop is asyncio.get_running_loop():
            await queue.join()

    async def aclose(self) -> None:
        """Stop the workers; what is still queued is dropped and counted."""
        self._closed = True
        queue, tasks = self._queue, self._tasks
        self._queue, self._tasks = None, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if queue is not None:
            with self._lock:
                self._dropped += queue.qsize()

    async def _work(self, queue: asyncio.Queue[_Job]) -> None:
        while True:
            job = await queue.get()
            try:
                await self._evaluate(job)
            except Exception as exc:  # noqa: BLE001 - a shadow failure never reaches a call
                with self._lock:
                    self._failed += 1
                _LOG.warning(
                    "shadow: decision %r not evaluated (%s)", job.decision_id, type(exc).__name__
                )
            finally:
                queue.task_done()

    async def _evaluate(self, job: _Job) -> None:
        observation = job.observation
        try:
            async with asyncio.timeout(self._budget_s):
                candidate = await decide(self._engine, self._path, observation.document)
        except TimeoutError:
            with self._lock:
                self._timed_out += 1
            return
        found = change(observation.recorded, candidate)
        with self._lock:
            self._evaluated += 1
            if found is None:
                self._agreed += 1
            else:
                self._disagreed[found] += 1
        if self._on_result is not None:
            self._on_result(observation.tool, found)
        if found is not None and self._record is not None:
            self._write(job, found, candidate)

    def _write(self, job: _Job, found: str, candidate: Outcome) -> None:
        enforced = job.observation.recorded
        # Results and codes only: messages and reasons may quote argument values.
        record = {
            "type": "shadow",
            "time": _utc(self._wall()),
            "decision_id": job.decision_id,
            "tool": job.observation.tool,
            "change": found,
            "enforced": {"result": enforced.result, "code": enforced.code},
            "candidate": {"result": candidate.result, "code": candidate.code},
            "message_changed": enforced.message != candidate.message,
            "reasons_changed": enforced.reasons != candidate.reasons,
            "candidate_engine": self._engine.identity,
            "candidate_revision": self._engine.revision(),
        }
        assert self._record is not None  # noqa: S101 - checked by the caller
        written = self._record(record)
        add_done_callback = getattr(written, "add_done_callback", None)
        if add_done_callback is not None:
            add_done_callback(self._written)

    def _written(self, future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            with self._lock:
                self._failed += 1
            _LOG.warning("shadow: a disagreement record could not be written")
