"""OPA bundles for the WebAssembly engine: reading, signature verification and polling.

A bundle is what ``opa build -t wasm`` writes: ``policy.wasm``, ``data.json`` files and a
``.manifest`` naming the revision and the module's entrypoints, as a directory or a
``.tar.gz``. When a :class:`VerificationKey` is configured, the bundle must carry OPA's
``.signatures.json`` (one JWS over the list of files and their hashes), and every file must
be listed with its hash and every listed file present; anything else is refused. Archives
are read defensively, before anything in them is trusted (the signature is one of their
files): regular files and directories only, no path outside the root, and every bound
applied as the archive streams in. Every tar header (a directory's, a pax or GNU extension
header's) counts towards the member limit, file and extension data towards the size limit,
and the decompressed stream itself is cut off just past what those limits allow, so
neither a flood of empty headers nor a gzip bomb is read further than a bundle could be.
"""

from __future__ import annotations

import bz2
import contextvars
import gzip
import hashlib
import http.client
import io
import json
import lzma
import os
import posixpath
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import jwt

from gateway import _json
from gateway.policy._errors import PolicyError, PolicyLoadError

#: Default bound on a bundle's unpacked size.
DEFAULT_MAX_BUNDLE_BYTES: Final = 64 << 20
#: Default bound on a bundle's members: every tar header (files, directories, extension
#: headers) of an archive, every file and directory of a bundle directory.
DEFAULT_MAX_BUNDLE_MEMBERS: Final = 10_000
#: The most data one pax or GNU long-name header may carry (real ones hold a path or two).
_MAX_EXTENSION_BYTES: Final = 1 << 20
#: The most extension headers in a row before a member's own header.
_MAX_EXTENSION_CHAIN: Final = 4
_EXTENSION_TYPES: Final = frozenset(
    {tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK}
)
_NOT_REGULAR: Final = "bundle holds something other than regular files and directories"
_TOO_MANY: Final = "bundle has more members than the limit"
_TOO_LARGE: Final = "bundle is larger than the limit"
_CHUNK: Final = 1 << 16
_MAX_DETAIL: Final = 300
_MANIFEST: Final = ".manifest"
_SIGNATURES: Final = ".signatures.json"
_HASHES: Final[Mapping[str, Callable[[], Any]]] = {
    "SHA-256": hashlib.sha256,
    "SHA-384": hashlib.sha384,
    "SHA-512": hashlib.sha512,
}
_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
    | {"HS256", "HS384", "HS512"}
)


class BundleError(PolicyLoadError):
    """A bundle that cannot be read, fails verification, or does not load."""


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """How signed bundles are verified, as in OPA's ``keys`` and ``signing`` configuration.

    Attributes:
        key: a PEM public key (RS*, PS*, ES*) or the shared secret (HS*).
        algorithm: the one JWS algorithm accepted.
        key_id: if set, the signature's ``keyid`` (or its header's ``kid``) must match.
        scope: if set, the signature's ``scope`` must match.
    """

    key: str | bytes
    algorithm: str = "RS256"
    key_id: str | None = None
    scope: str | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in _ALGORITHMS:
            raise ValueError("unsupported bundle signing algorithm")


@dataclass(frozen=True, slots=True)
class Bundle:
    """One loaded bundle: the module, the merged data document and the manifest."""

    wasm: bytes
    data: bytes
    revision: str
    entrypoints: tuple[str, ...]
    manifest: Mapping[str, Any] = field(default_factory=dict)
    signed: bool = False


# -- reading files --------------------------------------------------------------------------


def _clean_name(name: str) -> str:
    # Names are only ever keys here (nothing is written to disk), but one that climbs out
    # of the root, or means the same file as another, is refused rather than reinterpreted.
    raw = name.replace("\\", "/")
    cleaned = posixpath.normpath("/" + raw).lstrip("/")
    if not cleaned or cleaned == "." or ".." in raw.split("/") or "\0" in cleaned:
        raise BundleError("bundle holds a file with an unsafe name")
    try:
        # tarfile decodes a name that is not UTF-8 with surrogate escapes: no JSON key.
        cleaned.encode("utf-8")
    except UnicodeEncodeError:
        raise BundleError("bundle holds a file with an unsafe name") from None
    return cleaned


class _Budget:
    """What an archive may still hold: members (tar headers) and bytes of data."""

    __slots__ = ("_chain", "_members", "_room")

    def __init__(self, max_members: int, max_bytes: int) -> None:
        self._members = max_members
        self._room = max_bytes
        self._chain = 0

    def take(self, size: int) -> None:
        """Count ``size`` bytes of data, before they are read."""
        self._room -= size
        if self._room < 0:
            raise BundleError(_TOO_LARGE)

    def member(self) -> None:
        """Count one member (a tar header, a file or a directory)."""
        self._members -= 1
        if self._members < 0:
            raise BundleError(_TOO_MANY)

    def header(self, info: tarfile.TarInfo) -> None:
        """Count one tar header and check its kind, before anything it announces is read."""
        self.member()
        if info.type in _EXTENSION_TYPES:
            # A pax or GNU header: its data (a path, a size) is read next, then the header
            # of the member it describes.
            self._chain += 1
            if self._chain > _MAX_EXTENSION_CHAIN or info.size > _MAX_EXTENSION_BYTES:
                raise BundleError("bundle holds a malformed tar extension header")
            self.take(info.size)
            return
        self._chain = 0
        if info.type == tarfile.GNUTYPE_SPARSE or not (info.isreg() or info.isdir()):
            # Links, devices, fifos, sparse files, global pax headers, unknown types.
            raise BundleError(_NOT_REGULAR)


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "gateway_bundle_budget", default=None
)


class _CountedInfo(tarfile.TarInfo):
    """A tar header that is counted against the archive's budget before it is processed."""

    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        # tarfile's hook for subclasses, called for every header it parses (extension
        # headers included, which never surface as members) before the header's data is read.
        budget = _BUDGET.get()
        if budget is not None:
            budget.header(self)
        proceed: tarfile.TarInfo = super()._proc_member(archive)  # type: ignore[misc]
        return proceed


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class _Inflating:
    """An archive's bytes, decompressed as they are read and refused past ``limit``.

    Decompression never runs ahead of what is read: a gzip bomb costs ``limit`` bytes.
    """

    def __init__(self, raw: bytes, limit: int) -> None:
        source = io.BytesIO(raw)
        self._source: _Readable
        if raw.startswith(b"\x1f\x8b"):
            self._source = gzip.GzipFile(fileobj=source, mode="rb")
        elif raw.startswith(b"BZh"):
            self._source = bz2.BZ2File(source)
        elif raw.startswith(b"\xfd7zXZ\x00"):
            self._source = lzma.LZMAFile(source)  # noqa: SIM115 - closed by close()
        else:
            self._source = source
        self._room = limit
        self._position = 0

    def read(self, size: int = -1, /) -> bytes:
        chunk = self._source.read(size if 0 <= size <= _CHUNK else _CHUNK)
        self._position += len(chunk)
        if self._position > self._room:
            raise BundleError(_TOO_LARGE)
        return chunk

    def write(self, data: bytes, /) -> int:
        raise io.UnsupportedOperation("write")

    def tell(self) -> int:
        return self._position

    def seek(self, position: int, /) -> int:
        raise io.UnsupportedOperation("seek")

    def close(self) -> None:
        self._source.close()


def _stream_limit(max_bytes: int, max_members: int) -> int:
    # Past its data (bounded by max_bytes), an archive holds one 512-byte header per member
    # and under 512 bytes of padding after each member's data; then its end marker and,
    # as tar writers pad, up to a record. Nothing past that is read.
    return max_bytes + (max_members + 1) * 2 * tarfile.BLOCKSIZE + 2 * tarfile.RECORDSIZE


def _read_archive(
    raw: bytes, max_bytes: int, max_members: int = DEFAULT_MAX_BUNDLE_MEMBERS
) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    budget = _Budget(max_members, max_bytes)
    stream = _Inflating(raw, _stream_limit(max_bytes, max_members))
    token = _BUDGET.set(budget)
    try:
        # Streamed (mode "r|"): read once, front to back, never seeking.
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_CountedInfo) as archive:
            for member in archive:
                # Every header was counted (and its kind checked) as it was parsed.
                if member.isdir():
                    continue
                if member.sparse is not None:
                    raise BundleError(_NOT_REGULAR)
                budget.take(member.size)
                name = _clean_name(member.name)
                if name in files:
                    raise BundleError("bundle holds a file twice")
                extracted = archive.extractfile(member)
                if extracted is None:
                    raise BundleError("bundle member is unreadable")
                content = extracted.read(member.size + 1)
                if len(content) != member.size:
                    raise BundleError("bundle member is truncated")
                files[name] = content
    except (
        tarfile.TarError,
        EOFError,
        OSError,
        zlib.error,
        lzma.LZMAError,
        RecursionError,
        ValueError,
    ) as exc:
        raise BundleError(
            "bundle is not a readable tar archive", detail=str(exc)[:_MAX_DETAIL]
        ) from None
    finally:
        _BUDGET.reset(token)
        stream.close()
    return files


def _read_directory(
    root: Path, max_bytes: int, max_members: int = DEFAULT_MAX_BUNDLE_MEMBERS
) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    budget = _Budget(max_members, max_bytes)
    for directory, subdirectories, names in os.walk(root, followlinks=False):
        subdirectories.sort()
        for subdirectory in subdirectories:
            # os.walk lists a link to a directory among the directories (and skips it).
            if Path(directory, subdirectory).is_symlink():
                raise BundleError(_NOT_REGULAR)
            budget.member()
        for name in sorted(names):
            path = Path(directory, name)
            if path.is_symlink() or not path.is_file():
                raise BundleError(_NOT_REGULAR)
            budget.member()
            size = path.stat().st_size
            budget.take(size)
            with path.open("rb") as file:
                content = file.read(size + 1)
            if len(content) != size:
                raise BundleError("bundle file changed while it was read")
            files[_clean_name(path.relative_to(root).as_posix())] = content
    return files


# -- hashing as OPA does --------------------------------------------------------------------


class _Number(str):
    """A JSON number's text, kept verbatim for hashing."""


_GO_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_GO_ESCAPES.update({"\b": "\\b", "\f": "\\f", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _go_json_string(text: str) -> str:
    out = ['"']
    for char in text:
        escaped = _GO_ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char < " ":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _go_json(value: Any) -> str:  # noqa: PLR0911 - one return per JSON kind
    # OPA hashes a JSON file over its value re-encoded: sorted keys, no space, numbers as
    # written, strings as Go's encoder writes them without HTML escaping.
    if isinstance(value, _Number):
        return str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _go_json_string(value)
    if isinstance(value, list):
        return "[" + ",".join(_go_json(item) for item in value) + "]"
    members = sorted(value.items(), key=lambda item: item[0].encode("utf-8"))
    return "{" + ",".join(f"{_go_json_string(k)}:{_go_json(v)}" for k, v in members) + "}"


def _file_hash(name: str, content: bytes, algorithm: str) -> str:
    hasher = _HASHES[algorithm]()
    if name.endswith(".json") or posixpath.basename(name) == _MANIFEST:
        try:
            value = json.loads(
                content,
                parse_int=_Number,
                parse_float=_Number,
                parse_constant=lambda _: (_ for _ in ()).throw(ValueError("constant")),
                object_pairs_hook=_json._unique_members,  # noqa: SLF001 - the strict hook
            )
        except (ValueError, RecursionError):
            raise BundleError("bundle JSON file is not valid JSON") from None
        hasher.update(_go_json(value).encode("utf-8"))
    else:
        hasher.update(content)
    return str(hasher.hexdigest())


# -- verification ---------------------------------------------------------------------------


def _verify(files: Mapping[str, bytes], key: VerificationKey) -> None:  # noqa: PLR0912 - one check per flaw
    raw = files.get(_SIGNATURES)
    if raw is None:
        raise BundleError("bundle is not signed but a verification key is configured")
    try:
        signatures = _json.parse_trusted(raw)
    except _json.StrictJSONError:
        raise BundleError("bundle signatures are not valid JSON") from None
    tokens = signatures.get("signatures") if isinstance(signatures, dict) else None
    if not isinstance(tokens, list) or len(tokens) != 1 or not isinstance(tokens[0], str):
        raise BundleError("bundle must carry exactly one signature")
    try:
        header = jwt.get_unverified_header(tokens[0])
        payload_bytes = jwt.api_jws.PyJWS().decode(tokens[0], key.key, algorithms=[key.algorithm])
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        raise BundleError("bundle signature does not verify", detail=type(exc).__name__) from None
    try:
        payload = _json.parse_trusted(payload_bytes)
    except _json.StrictJSONError:
        raise BundleError("bundle signature payload is not valid JSON") from None
    if not isinstance(payload, dict):
        raise BundleError("bundle signature payload is not an object")
    if key.key_id is not None and key.key_id not in (payload.get("keyid"), header.get("kid")):
        raise BundleError("bundle is signed with another key id")
    if key.scope is not None and payload.get("scope") != key.scope:
        raise BundleError("bundle is signed for another scope")
    listed = payload.get("files")
    if not isinstance(listed, list):
        raise BundleError("bundle signature lists no files")
    seen: set[str] = set()
    for entry in listed:
        if not isinstance(entry, dict):
            raise BundleError("bundle signature lists a malformed file")
        name, digest, algorithm = entry.get("name"), entry.get("hash"), entry.get("algorithm")
        if not isinstance(name, str) or not isinstance(digest, str) or algorithm not in _HASHES:
            raise BundleError("bundle signature lists a malformed file")
        name = _clean_name(name)
        if name in seen:
            raise BundleError("bundle signature lists a file twice")
        seen.add(name)
        content = files.get(name)
        if content is None:
            raise BundleError("bundle signature lists a file the bundle lacks")
        if _file_hash(name, content, str(algorithm)) != digest.lower():
            raise BundleError("bundle file does not match its signed hash")
    unsigned = set(files) - seen - {_SIGNATURES}
    if unsigned:
        raise BundleError("bundle holds files its signature does not cover")


# -- assembling -----------------------------------------------------------------------------


def _merge_data(files: Mapping[str, bytes]) -> bytes:
    merged: dict[str, Any] = {}
    for name in sorted(files):
        if posixpath.basename(name) != "data.json":
            continue
        try:
            value = _json.parse_trusted(files[name])
        except _json.StrictJSONError:
            raise BundleError("bundle data is not valid JSON") from None
        parts = [part for part in posixpath.dirname(name).split("/") if part]
        node = merged
        for part in parts:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise BundleError("bundle data files overlap")
            node = child
        if not isinstance(value, dict):
            raise BundleError("bundle data.json must hold an object")
        for key, item in value.items():
            if key in node:
                raise BundleError("bundle data files overlap")
            node[key] = item
    return _json.canonical(merged)


def digest_revision(*parts: bytes) -> str:
    """A revision for bundles whose manifest names none: a digest of their contents."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(hashlib.sha256(part).digest())
    return "sha256:" + hasher.hexdigest()[:16]


def bundle_from_files(
    files: Mapping[str, bytes], *, verification: VerificationKey | None = None
) -> Bundle:
    """Assemble a bundle from its files by name (verified first if a key is given).

    Raises:
        BundleError: the bundle is unsigned or fails verification while a key is
            configured, has no single wasm module, or its manifest or data is malformed.
    """
    if verification is not None:
        _verify(files, verification)
    manifest: dict[str, Any] = {}
    if _MANIFEST in files:
        try:
            parsed = _json.parse_trusted(files[_MANIFEST])
        except _json.StrictJSONError:
            raise BundleError("bundle manifest is not valid JSON") from None
        if not isinstance(parsed, dict):
            raise BundleError("bundle manifest is not an object")
        manifest = parsed
    modules = manifest.get("wasm") or []
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise BundleError("bundle manifest lists its modules malformed")
    names = {_clean_name(str(m.get("module", ""))) for m in modules}
    if not names and "policy.wasm" in files:
        names = {"policy.wasm"}
    if len(names) != 1:
        raise BundleError("bundle must hold exactly one wasm module")
    (module_name,) = names
    wasm = files.get(module_name)
    if wasm is None:
        raise BundleError("bundle manifest names a module the bundle lacks")
    entrypoints = tuple(str(m.get("entrypoint", "")) for m in modules)
    data = _merge_data(files)
    revision = manifest.get("revision", "")
    if not isinstance(revision, str):
        raise BundleError("bundle manifest revision is not a string")
    return Bundle(
        wasm=wasm,
        data=data,
        revision=revision or digest_revision(wasm, data),
        entrypoints=entrypoints,
        manifest=manifest,
        signed=verification is not None,
    )


def read_bundle(
    source: str | os.PathLike[str] | bytes,
    *,
    verification: VerificationKey | None = None,
    max_bytes: int = DEFAULT_MAX_BUNDLE_BYTES,
    max_members: int = DEFAULT_MAX_BUNDLE_MEMBERS,
) -> Bundle:
    """Read a bundle from a directory, a ``.tar.gz`` file, or the archive's bytes.

    ``max_bytes`` bounds the files' data, ``max_members`` the archive's tar headers (every
    one: files, directories, extension headers) or the directory's files and directories.
    Both are applied while the archive is read, before its signature is checked.

    Raises:
        BundleError: see :func:`bundle_from_files`; also an unreadable or oversized source,
            or one holding more members than the limit.
    """
    if isinstance(source, bytes):
        files = _read_archive(source, max_bytes, max_members)
    else:
        path = Path(source)
        try:
            if path.is_dir():
                files = _read_directory(path, max_bytes, max_members)
            else:
                if path.stat().st_size > max_bytes:
                    raise BundleError(_TOO_LARGE)
                files = _read_archive(path.read_bytes(), max_bytes, max_members)
        except OSError as exc:
            raise BundleError("bundle is unreadable", detail=str(exc)[:_MAX_DETAIL]) from None
    return bundle_from_files(files, verification=verification)


# -- polling --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one poll did: ``activated`` a new bundle, found it ``unchanged``, or ``failed``."""

    outcome: str
    revision: str | None = None
    error: BundleError | None = None


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port or default


class _CredentialsStayHome(urllib.request.HTTPRedirectHandler):
    """Follows redirects, sending the poller's own headers only where the bundle URL is.

    urllib copies every request header to the redirected request, wherever it points: a
    bundle server (or whoever answers for it over plain HTTP) could send the credentials
    on to a host of its choosing. A redirect to another scheme, host or port loses them.
    """

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__()
        self._names = {name.capitalize() for name in headers}

    def redirect_request(  # noqa: PLR0917 - urllib's signature
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            for name in self._names:
                new.remove_header(name)
        return new


def poll_delay(interval_s: float, max_interval_s: float | None, draw: Callable[[], float]) -> float:
    """The wait before the next poll: ``interval_s``, or drawn between it and ``max_interval_s``.

    As OPA's ``min_delay_seconds`` and ``max_delay_seconds``: replicas that started together
    do not poll the server in step. ``draw`` gives a number in ``[0, 1)``.
    """
    if max_interval_s is None or max_interval_s <= interval_s:
        return interval_s
    return interval_s + (max_interval_s - interval_s) * draw()


class BundlePoller:
    """Downloads a bundle the way OPA's bundle plugin does, and hands on each new one.

    Each :meth:`poll` is one HTTP GET with ``If-None-Match`` carrying the last ETag; ``304``
    means unchanged. A download, verification or activation that fails keeps the bundle in
    force (``activate`` is never called with a bad bundle, and a bundle it refuses is
    not remembered).

    Args:
        url: the bundle's URL.
        activate: called with each new verified bundle (e.g. ``WasmEngine.activate``); it
            raises :class:`gateway.policy.PolicyError` to refuse one.
        verification: the key signed bundles are checked with.
        timeout_s: the most one download may take, from connecting to its last byte.
        headers: extra request headers (e.g. ``Authorization``), sent to the bundle URL's
            origin only: a redirect elsewhere is followed without them.
        max_bytes: the largest bundle accepted (downloaded, and its files unpacked).
        max_members: the most tar headers the bundle's archive may hold.
        etag: the ETag of the bundle already in force, if it came from this server.
    """

    def __init__(
        self,
        url: str,
        *,
        activate: Callable[[Bundle], object],
        verification: VerificationKey | None = None,
        timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
        max_bytes: int = DEFAULT_MAX_BUNDLE_BYTES,
        max_members: int = DEFAULT_MAX_BUNDLE_MEMBERS,
        etag: str | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError("bundle URL must be http or https")
        self._url = url
        self._activate = activate
        self._verification = verification
        self._timeout_s = timeout_s
        self._headers = dict(headers or {})
        # Redirects are followed; the headers given (credentials) only to the same origin.
        self._opener = urllib.request.build_opener(_CredentialsStayHome(self._headers))
        self._max_bytes = max_bytes
        self._max_members = max_members
        self._etag = etag
        self.last_error: BundleError | None = None

    @property
    def etag(self) -> str | None:
        """The ETag of the bundle in force, if the server gave one."""
        return self._etag

    def _download(self) -> tuple[int, bytes, str | None]:
        headers = dict(self._headers)
        if self._etag is not None:
            headers["If-None-Match"] = self._etag
        request = urllib.request.Request(self._url, headers=headers)  # noqa: S310 - checked
        # timeout_s bounds the whole download, not each read: a server that sends a byte
        # at a time cannot hold the poller for longer.
        deadline = time.monotonic() + self._timeout_s
        try:
            with self._opener.open(request, timeout=self._timeout_s) as response:
                chunks: list[bytes] = []
                size = 0
                while size <= self._max_bytes:
                    if time.monotonic() > deadline:
                        raise TimeoutError("bundle download passed its deadline")
                    chunk = response.read1(_CHUNK)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                return int(response.status), b"".join(chunks), response.headers.get("ETag")
        except urllib.error.HTTPError as exc:
            exc.close()
            return int(exc.code), b"", None

    def poll(self) -> PollResult:
        """Poll once (blocking; run it in a thread from async code)."""
        try:
            status, body, etag = self._download()
        except (OSError, ValueError, http.client.HTTPException) as exc:
            return self._failed(BundleError("bundle download failed", detail=type(exc).__name__))
        if status == 304:
            return PollResult("unchanged")
        if status != 200:
            return self._failed(BundleError("bundle server answered an error", detail=str(status)))
        if len(body) > self._max_bytes:
            return self._failed(BundleError(_TOO_LARGE))
        try:
            bundle = bundle_from_files(
                _read_archive(body, self._max_bytes, self._max_members),
                verification=self._verification,
            )
            self._activate(bundle)
        except PolicyError as exc:
            error = (
                exc if isinstance(exc, BundleError) else BundleError(str(exc), detail=exc.detail)
            )
            return self._failed(error)
        self._etag = etag
        self.last_error = None
        return PollResult("activated", revision=bundle.revision)

    def _failed(self, error: BundleError) -> PollResult:
        self.last_error = error
        return PollResult("failed", error=error)


# -- building (with the opa binary) ---------------------------------------------------------


def policy_files(root: str | os.PathLike[str]) -> list[Path]:
    """The files of a policy directory a bundle is built from, sorted.

    Every ``*.rego`` except ``*_test.rego``, and every ``data.json``, below ``root``.
    """
    return [
        path
        for path in sorted(Path(root).rglob("*"))
        if path.is_file()
        and (
            (path.suffix == ".rego" and not path.name.endswith("_test.rego"))
            or path.name == "data.json"
        )
    ]


def read_policy_data(root: str | os.PathLike[str]) -> Any:
    """The data document of a policy directory: its ``data.json`` files merged, as OPA does.

    For reading the configuration the policies hold (non-integer numbers become floats).

    Raises:
        BundleError: a file is unreadable, not a JSON object, or two of them overlap.
    """
    base = Path(root)
    files: dict[str, bytes] = {}
    try:
        for path in policy_files(base):
            if path.name == "data.json":
                files[path.relative_to(base).as_posix()] = path.read_bytes()
    except OSError as exc:
        raise BundleError("policy data is unreadable", detail=str(exc)[:_MAX_DETAIL]) from None
    return _json.parse_trusted(_merge_data(files), exact=False)


def build_bundle(
    opa_binary: str | os.PathLike[str],
    policy_dir: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    entrypoints: tuple[str, ...],
    revision: str | None = None,
    signing_key: str | os.PathLike[str] | None = None,
    signing_alg: str | None = None,
    timeout_s: float = 120.0,
) -> Path:
    """Compile a policy directory to a wasm bundle with ``opa build -b -t wasm``.

    Only the files OPA would serve are taken: every ``*.rego`` except ``*_test.rego``, and
    every ``data.json``, at their paths below ``policy_dir``.

    Raises:
        BundleError: the directory holds no policy, or ``opa build`` fails.
    """
    import shutil  # noqa: PLC0415 - only building needs these
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    root = Path(policy_dir)
    sources = policy_files(root)
    if not any(path.suffix == ".rego" for path in sources):
        raise BundleError("no policy to build")
    # opa runs in the staging directory: a relative path to it must not change meaning.
    binary = str(Path(opa_binary).resolve()) if os.sep in str(opa_binary) else str(opa_binary)
    with tempfile.TemporaryDirectory(prefix="gateway-bundle-") as staging:
        for path in sources:
            target = Path(staging, path.relative_to(root))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        target = Path(output).resolve()
        command = [binary, "build", "-b", "-t", "wasm", "-o", str(target)]
        for entrypoint in entrypoints:
            command += ["-e", entrypoint]
        if revision is not None:
            command += ["--revision", revision]
        if signing_key is not None:
            command += ["--signing-key", str(signing_key)]
        if signing_alg is not None:
            command += ["--signing-alg", signing_alg]
        # Built from inside the staging directory, the bundle names its files relatively.
        command.append(".")
        try:
            result = subprocess.run(  # noqa: S603 - a fixed binary and argument list
                command,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                cwd=staging,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BundleError("opa build did not run", detail=str(exc)[:_MAX_DETAIL]) from None
    if result.returncode != 0:
        # opa prints its compile errors (file:line: what) on stdout, other failures on stderr.
        report = (result.stdout + result.stderr).strip()
        raise BundleError("opa build failed", detail=report[:_MAX_DETAIL])
    return target
