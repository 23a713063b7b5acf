"""The OPA server engine: decisions over OPA's REST API, with aiohttp or requests.

The decision request carries the input document as exact JSON bytes (numbers are never
rounded through floats), has one hard deadline, and is never retried: a retry would double
the latency of a failing engine and could evaluate twice. Every transport exception is
translated in one place (:func:`_translate`) into a :class:`gateway.policy.PolicyError`;
nothing from aiohttp, requests or OPA's error body reaches a caller.

The policy revision is watched by polling: the active bundle revisions when OPA serves
bundles, otherwise a digest of the loaded policy modules. Data written through OPA's data
API (``PUT``/``PATCH``/``DELETE /v1/data``) changes neither, and no cheap read reveals it
(``GET /v1/data`` evaluates every rule of every package). So the bound does not depend on
the watcher: a decision of these engines is reused for at most ``max_decision_age``
seconds (default ``revision_interval + timeout``), whatever the policy's own TTL, and a
change to OPA's state through any API (policies, data, bundles, discovery) stops being
hidden by a cached decision within that bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import aiohttp
import requests
import requests.adapters
from opentelemetry import propagate, trace

from gateway import _json
from gateway.policy._decision import normalize
from gateway.policy._document import InputDocument
from gateway.policy._engine import EngineAnswer, EngineInput, ItemAnswer
from gateway.policy._errors import (
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    PolicyError,
)

_MAX_DETAIL: Final = 500
_JSON_HEADERS: Final = {"Content-Type": "application/json"}
DEFAULT_TIMEOUT: Final = 1.0
DEFAULT_REVISION_INTERVAL: Final = 5.0


def _base_url(url: str) -> str:
    # ``scheme://host:port`` (8181, OPA's, for http and 443 for https when none is given);
    # every request starts here, decisions and health checks alike.
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"OPA URL must be http(s)://host[:port], got {url!r}")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment or parsed.username:
        raise ValueError(f"OPA URL must not carry a path, query or credentials: {url!r}")
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    port = parsed.port or (443 if parsed.scheme == "https" else 8181)
    return f"{parsed.scheme}://{host}:{port}"


def _auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


# -- I/O-free logic shared by the async and the sync engine --------------------------------


def request_body(document: InputDocument) -> bytes:
    """``{"input": <document>}`` as bytes, numbers exact."""
    return b'{"input":' + document.to_json() + b"}"


def batch_query(path: str) -> str:
    """The ad-hoc query that evaluates ``path`` once per member of ``input.batch``.

    Its text depends on the (normalized, slash-separated) decision path alone, never on
    any document: the documents travel as the query's input, so nothing a caller sent can
    change what is evaluated. Each member of ``input.batch`` is the whole ``input`` of one
    evaluation (``with input as``); the result ``r`` maps each index to ``[]`` (undefined)
    or ``[value]``. The path's parts are quoted as JSON strings (``data["gateway"]...``),
    so a part that is a Rego keyword is still only a name.
    """
    reference = "data" + "".join(f"[{json.dumps(part)}]" for part in path.split("/"))
    return f"r := {{i: [v | v := {reference} with input as b] | some i, b in input.batch}}"


def batch_body(path: str, documents: Sequence[EngineInput]) -> bytes:
    """``{"query": <batch_query>, "input": {"batch": [<documents>]}}`` as bytes."""
    return b"".join(
        (
            b'{"input":{"batch":[',
            b",".join(document.to_json() for document in documents),
            b']},"query":',
            json.dumps(batch_query(path)).encode(),
            b"}",
        )
    )


def read_batch_response(status: int, body: bytes, *, count: int, revision: str) -> list[ItemAnswer]:
    """Read OPA's answer to a batch query: one entry per document, in order.

    Raises:
        EngineError: a non-200 status (an evaluation error in any item fails the whole
            query in OPA), or a body that is not the query's one result.
    """
    document = _parse_answer(body)
    if status != 200:
        code = document.get("code") if isinstance(document, dict) else None
        raise EngineError(f"OPA answered HTTP {status}", detail=f"{status} {code}"[:_MAX_DETAIL])
    results = document.get("result") if isinstance(document, dict) else None
    bindings = results[0] if isinstance(results, list) and len(results) == 1 else None
    items = bindings.get("r") if isinstance(bindings, dict) else None
    if not isinstance(items, dict):
        raise EngineError("OPA answered a batch query without its result")
    answers: list[ItemAnswer] = []
    for index in range(count):
        values = items.get(str(index))
        if values == []:
            answers.append(EngineAnswer(defined=False, revision=revision))
        elif isinstance(values, list) and len(values) == 1:
            answers.append(
                EngineAnswer(defined=True, value=normalize(values[0]), revision=revision)
            )
        else:
            answers.append(EngineError("OPA's batch answer lacks this item"))
    return answers


def _parse_answer(body: bytes) -> Any:
    # Strict where it matters to the decision (one value, no duplicate members, no NaN,
    # exact numbers), without the walk meant for untrusted arguments: OPA is the peer.
    try:
        return _json.parse_trusted(body)
    except _json.StrictJSONError:
        return None


def read_response(status: int, body: bytes, *, revision: str) -> EngineAnswer:
    """Read OPA's answer to a decision request.

    Raises:
        EngineError: a non-200 status (OPA's code kept in ``detail``), or a body that is not
            one JSON object.
    """
    document = _parse_answer(body)
    if status != 200:
        code = document.get("code") if isinstance(document, dict) else None
        message = document.get("message") if isinstance(document, dict) else None
        raise EngineError(
            f"OPA answered HTTP {status}",
            detail=f"{status} {code}: {message}"[:_MAX_DETAIL],
        )
    if not isinstance(document, dict):
        raise EngineError(
            "OPA answered with a body that is not a JSON object",
            detail=body[:_MAX_DETAIL].decode("utf-8", "replace"),
        )
    decision_id = document.get("decision_id")
    bundles = _bundle_revision(document.get("provenance"))
    answer_revision = bundles or revision
    if "result" not in document:
        return EngineAnswer(
            defined=False,
            decision_id=decision_id if isinstance(decision_id, str) else None,
            revision=answer_revision,
        )
    return EngineAnswer(
        defined=True,
        value=normalize(document["result"]),
        decision_id=decision_id if isinstance(decision_id, str) else None,
        revision=answer_revision,
    )


def _bundle_revision(provenance: Any) -> str | None:
    if not isinstance(provenance, dict):
        return None
    bundles = provenance.get("bundles")
    if not isinstance(bundles, dict) or not bundles:
        return None
    parts = []
    for name in sorted(bundles):
        entry = bundles[name]
        revision = entry.get("revision") if isinstance(entry, dict) else None
        parts.append(f"{name}={revision}")
    return "bundles:" + ",".join(parts)


def revision_from(bundles_body: bytes, policies_body: bytes | None) -> str:
    """The revision: active bundle revisions, else a digest of the loaded policy modules."""
    try:
        bundles = json.loads(bundles_body).get("result")
    except (ValueError, AttributeError):
        bundles = None
    if isinstance(bundles, dict) and bundles:
        parts = []
        for name in sorted(bundles):
            manifest = bundles[name].get("manifest", {}) if isinstance(bundles[name], dict) else {}
            parts.append(f"{name}={manifest.get('revision', '')}")
        return "bundles:" + ",".join(parts)
    hasher = hashlib.sha256()
    try:
        policies = json.loads(policies_body or b"{}").get("result", [])
    except (ValueError, AttributeError):
        policies = []
    for policy in sorted(policies, key=lambda item: str(item.get("id", ""))):
        hasher.update(str(policy.get("id", "")).encode() + b"\0")
        hasher.update(str(policy.get("raw", "")).encode() + b"\0")
    return "policies:" + hasher.hexdigest()[:16]


@contextlib.contextmanager
def _translate(timeout: float) -> Iterator[None]:
    # The one boundary where foreign exceptions become ours.
    try:
        yield
    except PolicyError:
        raise
    except (TimeoutError, aiohttp.ServerTimeoutError, requests.Timeout):
        raise EngineTimeoutError(f"OPA did not answer within {timeout} s") from None
    except (aiohttp.ClientResponseError, aiohttp.ContentTypeError) as exc:
        raise EngineError(
            "OPA answered an invalid response", detail=str(exc)[:_MAX_DETAIL]
        ) from None
    except (aiohttp.ClientError, requests.ConnectionError, ConnectionError, OSError) as exc:
        raise EngineUnavailableError(
            "OPA is unreachable", detail=f"{type(exc).__name__}: {exc}"[:_MAX_DETAIL]
        ) from None
    except (requests.RequestException, ValueError) as exc:
        raise EngineError(
            "OPA request failed", detail=f"{type(exc).__name__}: {exc}"[:_MAX_DETAIL]
        ) from None


# -- the async engine -----------------------------------------------------------------------


class OpaRestEngine:
    """Decisions from a real OPA server, over keep-alive HTTP (aiohttp underneath).

    Use as ``async with OpaRestEngine(url) as engine:`` (or :meth:`open`/:meth:`close`).

    Args:
        url: ``http(s)://host:port`` of the OPA server.
        timeout: the hard deadline of one decision request, in seconds.
        token: an optional bearer token for OPA's API.
        provenance: ask OPA for bundle revisions on every decision (``?provenance=true``);
            off by default, since the watcher already tracks the revision and provenance
            makes every answer larger.
        revision_interval: how often the revision watcher polls, in seconds (0: never).
        on_revision_change: called with the new revision when the watcher sees a change.
        max_decision_age: the longest one decision is reused by a cache (seconds; default
            ``revision_interval + timeout``, or ``DEFAULT_REVISION_INTERVAL + timeout``
            without a watcher).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        token: str | None = None,
        provenance: bool = False,
        revision_interval: float = DEFAULT_REVISION_INTERVAL,
        on_revision_change: Callable[[str], None] | None = None,
        max_decision_age: float | None = None,
    ) -> None:
        base = _base_url(url)
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if revision_interval < 0:
            raise ValueError("revision_interval must be >= 0")
        self._max_decision_age = _decision_age(max_decision_age, revision_interval, timeout)
        self._url = url.rstrip("/")
        self._timeout = timeout
        self._provenance = provenance
        self._interval = revision_interval
        self._on_change = on_revision_change
        self._headers = _auth_headers(token)
        self._base = base
        self._root = f"{base}/v1"
        self._session: aiohttp.ClientSession | None = None
        self._revision = "unknown"
        self._watcher: asyncio.Task[None] | None = None

    async def open(self) -> OpaRestEngine:
        """Open the connection pool, read the revision, start the watcher."""
        if self._session is None:
            # One pooled keep-alive session. Its total timeout bounds connecting, sending and
            # reading the whole body: a hard deadline per request. It never retries.
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout),
            )
            with contextlib.suppress(PolicyError):
                await self.refresh_revision()
            if self._interval > 0:
                self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def close(self) -> None:
        """Stop the watcher and close the pool."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> OpaRestEngine:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def identity(self) -> str:
        """``opa:<url>``."""
        return f"opa:{self._url}"

    @property
    def url(self) -> str:
        """The server URL."""
        return self._url

    @property
    def max_decision_age(self) -> float:
        """The longest one decision is reused, in seconds (see the module docstring)."""
        return self._max_decision_age

    def revision(self) -> str:
        """The last revision the watcher saw."""
        return self._revision

    async def _get(self, url: str) -> tuple[int, bytes]:
        return await self._send("GET", url, None)

    async def _send(self, method: str, url: str, body: bytes | None) -> tuple[int, bytes]:
        session = self._session
        if session is None:
            raise EngineUnavailableError("engine is not open")
        headers = _JSON_HEADERS if body is not None else None
        if trace.get_current_span().get_span_context().is_valid:
            # The call's W3C trace context, for an OPA that traces (distributed_tracing).
            headers = dict(headers or {})
            propagate.inject(headers)
        with _translate(self._timeout):
            async with session.request(method, url, data=body, headers=headers) as response:
                return response.status, await response.read()

    async def evaluate(self, path: str, document: InputDocument) -> EngineAnswer:
        """POST the input document to ``/v1/data/<path>`` and read the answer."""
        url = f"{self._root}/data/{path}"
        if self._provenance:
            url += "?provenance=true"
        status, body = await self._send("POST", url, request_body(document))
        return read_response(status, body, revision=self._revision)

    async def evaluate_many(self, path: str, documents: Sequence[EngineInput]) -> list[ItemAnswer]:
        """Evaluate ``path`` over every document in one ``POST /v1/query`` (:func:`batch_query`).

        Raises:
            PolicyError: the request failed, or OPA could not evaluate the query (no item
                is decided then).
        """
        if not documents:
            return []
        revision = self._revision
        status, body = await self._send("POST", f"{self._root}/query", batch_body(path, documents))
        return read_batch_response(status, body, count=len(documents), revision=revision)

    async def refresh_revision(self) -> str:
        """Read the revision from OPA now; notify when it changed."""
        _, bundles = await self._get(f"{self._root}/data/system/bundles")
        policies = None
        if not _has_bundles(bundles):
            _, policies = await self._get(f"{self._root}/policies")
        revision = revision_from(bundles, policies)
        changed = revision != self._revision
        self._revision = revision
        if changed and self._on_change is not None:
            self._on_change(revision)
        return revision

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            with contextlib.suppress(PolicyError):
                await self.refresh_revision()

    async def healthy(self) -> bool:
        """Whether OPA answers ``/health`` with 200 (plugins ready included)."""
        try:
            status, _ = await self._get(f"{self._base}/health")
        except PolicyError:
            return False
        return status == 200

    async def wait_until_ready(self, within: float = 10.0, *, poll: float = 0.05) -> None:
        """Wait for ``/health``; raise :class:`EngineUnavailableError` after ``within`` s."""
        try:
            async with asyncio.timeout(within):
                while not await self.healthy():  # noqa: ASYNC110 - polling a remote server
                    await asyncio.sleep(poll)
        except TimeoutError:
            raise EngineUnavailableError(f"OPA at {self._url} not ready after {within} s") from None

    async def put_policy(self, policy_id: str, rego: str) -> None:
        """Create or replace a policy module, then refresh the revision."""
        status, body = await self._send(
            "PUT", f"{self._root}/policies/{urllib.parse.quote(policy_id, safe='')}", rego.encode()
        )
        _expect_ok(status, body)
        await self.refresh_revision()

    async def put_data(self, path: str, value: Any) -> None:
        """Create or replace a data document at ``path`` (slash-separated)."""
        status, body = await self._send(
            "PUT", f"{self._root}/data/{path.strip('/')}", _json.canonical(value)
        )
        _expect_ok(status, body)


def _decision_age(configured: float | None, interval: float, timeout: float) -> float:
    if configured is None:
        return (interval if interval > 0 else DEFAULT_REVISION_INTERVAL) + timeout
    if not configured >= 0:
        raise ValueError("max_decision_age must be >= 0")
    return float(configured)


def _has_bundles(body: bytes) -> bool:
    try:
        result = json.loads(body).get("result")
    except (ValueError, AttributeError):
        return False
    return isinstance(result, dict) and bool(result)


def _expect_ok(status: int, body: bytes) -> None:
    if status not in (200, 204):
        raise EngineError(
            f"OPA answered HTTP {status}", detail=body[:_MAX_DETAIL].decode("utf-8", "replace")
        )


# -- the sync engine ------------------------------------------------------------------------


class OpaRestEngineSync:
    """The blocking twin of :class:`OpaRestEngine` (requests underneath), for sync code.

    ``evaluate`` (async) offloads the blocking request to a worker thread, so the sync
    engine can also back a :class:`gateway.policy.PolicyAuthorizer`. Its revision is read
    on demand with :meth:`refresh_revision`; a cache reuses one of its decisions for at
    most ``max_decision_age`` seconds (default ``DEFAULT_REVISION_INTERVAL + timeout``).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        token: str | None = None,
        provenance: bool = False,
        max_decision_age: float | None = None,
    ) -> None:
        base = _base_url(url)
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._max_decision_age = _decision_age(max_decision_age, 0.0, timeout)
        self._url = url.rstrip("/")
        self._timeout = timeout
        self._provenance = provenance
        self._base = base
        self._root = f"{base}/v1"
        # One pooled keep-alive session; no request is ever retried.
        self._session = requests.Session()
        self._session.headers.update(_auth_headers(token))
        adapter = requests.adapters.HTTPAdapter(max_retries=0)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._revision = "unknown"

    def close(self) -> None:
        """Close the connection pool."""
        self._session.close()

    def __enter__(self) -> OpaRestEngineSync:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def identity(self) -> str:
        """``opa:<url>``."""
        return f"opa:{self._url}"

    @property
    def max_decision_age(self) -> float:
        """The longest one decision is reused, in seconds."""
        return self._max_decision_age

    def revision(self) -> str:
        """The last revision read."""
        return self._revision

    def _request(self, method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
        # requests bounds each socket read, not the whole exchange; the body is streamed and
        # the deadline checked between chunks, so a server that drips bytes cannot hold a
        # decision past the deadline by more than one read.
        deadline = time.monotonic() + self._timeout
        with (
            _translate(self._timeout),
            self._session.request(
                method,
                url,
                data=body,
                headers=_JSON_HEADERS if body is not None else None,
                timeout=self._timeout,
                stream=True,
            ) as response,
        ):
            chunks = []
            for chunk in response.iter_content(chunk_size=65536):
                if time.monotonic() > deadline:
                    raise EngineTimeoutError(f"OPA did not answer within {self._timeout} s")
                chunks.append(chunk)
            if time.monotonic() > deadline:
                raise EngineTimeoutError(f"OPA did not answer within {self._timeout} s")
            return response.status_code, b"".join(chunks)

    def evaluate_sync(self, path: str, document: InputDocument) -> EngineAnswer:
        """POST the input document and read the answer, blocking."""
        url = f"{self._root}/data/{path}"
        if self._provenance:
            url += "?provenance=true"
        status, body = self._request("POST", url, request_body(document))
        return read_response(status, body, revision=self._revision)

    async def evaluate(self, path: str, document: InputDocument) -> EngineAnswer:
        """:meth:`evaluate_sync` in a worker thread."""
        return await asyncio.to_thread(self.evaluate_sync, path, document)

    def evaluate_many_sync(self, path: str, documents: Sequence[EngineInput]) -> list[ItemAnswer]:
        """Evaluate ``path`` over every document in one ``POST /v1/query``, blocking."""
        if not documents:
            return []
        revision = self._revision
        status, body = self._request("POST", f"{self._root}/query", batch_body(path, documents))
        return read_batch_response(status, body, count=len(documents), revision=revision)

    async def evaluate_many(self, path: str, documents: Sequence[EngineInput]) -> list[ItemAnswer]:
        """:meth:`evaluate_many_sync` in a worker thread."""
        return await asyncio.to_thread(self.evaluate_many_sync, path, documents)

    def refresh_revision(self) -> str:
        """Read the revision from OPA now."""
        _, bundles = self._request("GET", f"{self._root}/data/system/bundles")
        policies = None
        if not _has_bundles(bundles):
            _, policies = self._request("GET", f"{self._root}/policies")
        self._revision = revision_from(bundles, policies)
        return self._revision

    def healthy(self) -> bool:
        """Whether OPA answers ``/health`` with 200."""
        try:
            status, _ = self._request("GET", f"{self._base}/health")
        except PolicyError:
            return False
        return status == 200
