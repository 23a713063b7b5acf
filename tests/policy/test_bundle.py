"""Bundles as OPA builds them: reading, verifying OPA's signatures, polling a bundle server.

Bundles are built and signed by the real ``opa build``; the bundle server is a real HTTP
server on 127.0.0.1 (the standard library's, in a thread) that speaks ETag and 304.
"""

from __future__ import annotations

import contextlib
import io
import socket
import tarfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import Decision
from gateway.policy import (
    CachingAuthorizer,
    DecisionCache,
    EmbeddedEngine,
    EngineUnavailableError,
)
from gateway.policy._bundle import (
    Bundle,
    BundleError,
    BundlePoller,
    VerificationKey,
    build_bundle,
    poll_delay,
    read_bundle,
)
from gateway.testing import BundleServer, pem_pair
from tests.policy.conftest import authorization

POLICY: Final = """package signed

answer := {"limit": data.signed.limit, "note": data.signed.note, "deep": data.signed.deep.x}
"""
DATA: Final = '{"limit": 1.50, "note": "<a&b> \\u2028 \\u0001 \\u00e9 \\ud840\\udc00 \\"q\\""}'
DEEP_DATA: Final = '{"x": [1E5, {"b": 2, "a": 1}]}'
ENTRYPOINT: Final = "signed/answer"
HMAC_SECRET: Final = "a-shared-secret-of-some-length-0123456789"  # noqa: S105 - a test key


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A policy directory with data at two paths, in the bundle layout."""
    root = tmp_path_factory.mktemp("signed-src")
    (root / "signed").mkdir()
    (root / "signed" / "policy.rego").write_text(POLICY)
    (root / "signed" / "data.json").write_text(DATA)
    (root / "signed" / "deep").mkdir()
    (root / "signed" / "deep" / "data.json").write_text(DEEP_DATA)
    return root


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, VerificationKey]]:
    """Signing key files for opa, and the matching verification keys, per algorithm."""
    root = tmp_path_factory.mktemp("keys")
    found: dict[str, tuple[Path, VerificationKey]] = {}
    for algorithm, private in (
        ("RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        ("ES256", ec.generate_private_key(ec.SECP256R1())),
    ):
        private_pem, public_pem = pem_pair(private)
        (root / f"{algorithm}.pem").write_bytes(private_pem)
        found[algorithm] = (root / f"{algorithm}.pem", VerificationKey(public_pem, algorithm))
    (root / "HS256.key").write_text(HMAC_SECRET)
    found["HS256"] = (root / "HS256.key", VerificationKey(HMAC_SECRET, "HS256"))
    return found


def _build(
    opa_binary: str,
    policy_dir: Path,
    output: Path,
    *,
    revision: str = "rev-1",
    key: tuple[Path, VerificationKey] | None = None,
) -> bytes:
    build_bundle(
        opa_binary,
        policy_dir,
        output,
        entrypoints=(ENTRYPOINT,),
        revision=revision,
        signing_key=None
        if key is None
        else (HMAC_SECRET if key[1].algorithm == "HS256" else key[0]),
        signing_alg=None if key is None else key[1].algorithm,
    )
    return output.read_bytes()


@pytest.fixture(scope="module")
def signed(
    opa_binary: str,
    policy_dir: Path,
    keys: dict[str, tuple[Path, VerificationKey]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, bytes]:
    """The bundle, signed by opa with each algorithm's key."""
    out = tmp_path_factory.mktemp("signed")
    return {
        algorithm: _build(opa_binary, policy_dir, out / f"{algorithm}.tar.gz", key=key)
        for algorithm, key in keys.items()
    }


@pytest.fixture(scope="module")
def unsigned(opa_binary: str, policy_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bundle without a signature."""
    return _build(opa_binary, policy_dir, tmp_path_factory.mktemp("unsigned") / "b.tar.gz")


def _files(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        out: dict[str, bytes] = {}
        for member in tar:
            extracted = tar.extractfile(member)
            if extracted is not None:
                out[member.name.lstrip("/")] = extracted.read()
        return out


def _archive(files: Mapping[str, bytes], *, extra: list[tarfile.TarInfo] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo("/" + name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for info in extra or []:
            tar.addfile(info)
    return buffer.getvalue()


# -- reading and verifying -----------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["RS256", "ES256", "HS256"])
def test_a_bundle_signed_by_opa_verifies_and_evaluates(
    signed: dict[str, bytes], keys: dict[str, tuple[Path, VerificationKey]], algorithm: str
) -> None:
    bundle = read_bundle(signed[algorithm], verification=keys[algorithm][1])
    assert bundle.signed
    assert bundle.revision == "rev-1"
    assert bundle.entrypoints == (ENTRYPOINT,)
    answer = EmbeddedEngine(bundle).evaluate_sync(ENTRYPOINT, b"{}")
    assert answer.value["deep"][1] == {"a": 1, "b": 2}
    assert str(answer.value["limit"]) == "1.50"
    assert answer.value["note"] == '<a&b> \u2028 \u0001 é \U00020000 "q"'


def test_an_unsigned_bundle_is_refused_when_a_key_is_configured(
    unsigned: bytes, keys: dict[str, tuple[Path, VerificationKey]]
) -> None:
    with pytest.raises(BundleError, match="not signed"):
        read_bundle(unsigned, verification=keys["RS256"][1])
    assert read_bundle(unsigned).signed is False


@pytest.mark.parametrize(
    ("signer", "verifier"), [("RS256", "ES256"), ("ES256", "RS256"), ("HS256", "RS256")]
)
def test_a_bundle_signed_with_another_key_is_refused(
    signed: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
    signer: str,
    verifier: str,
) -> None:
    with pytest.raises(BundleError, match="does not verify"):
        read_bundle(signed[signer], verification=keys[verifier][1])


def test_a_wrong_shared_secret_is_refused(signed: dict[str, bytes]) -> None:
    with pytest.raises(BundleError, match="does not verify"):
        read_bundle(signed["HS256"], verification=VerificationKey("another-secret-" * 3, "HS256"))


@pytest.mark.parametrize("name", ["data.json", "policy.wasm", ".manifest", "policy.rego"])
def test_a_changed_file_is_refused(
    signed: dict[str, bytes], keys: dict[str, tuple[Path, VerificationKey]], name: str
) -> None:
    files = _files(signed["RS256"])
    target = next(n for n in files if n.endswith(name))
    if target.endswith((".json", ".manifest")):
        files[target] = files[target].replace(b"}", b', "added": 1}', 1)
    else:
        files[target] = files[target] + b"\0"
    with pytest.raises(BundleError, match="does not match"):
        read_bundle(_archive(files), verification=keys["RS256"][1])


def test_reformatted_json_keeps_its_signature(
    signed: dict[str, bytes], keys: dict[str, tuple[Path, VerificationKey]]
) -> None:
    # OPA hashes a JSON file over its value, not its bytes: white space does not matter.
    files = _files(signed["RS256"])
    target = "data.json"
    files[target] = b"\n  " + files[target].replace(b",", b" ,\n ") + b"\n"
    assert read_bundle(_archive(files), verification=keys["RS256"][1]).signed


def test_a_file_the_signature_does_not_cover_is_refused(
    signed: dict[str, bytes], keys: dict[str, tuple[Path, VerificationKey]]
) -> None:
    files = _files(signed["RS256"]) | {"other/data.json": b'{"x": 1}'}
    with pytest.raises(BundleError, match="does not cover"):
        read_bundle(_archive(files), verification=keys["RS256"][1])


def test_a_listed_file_that_is_missing_is_refused(
    signed: dict[str, bytes], keys: dict[str, tuple[Path, VerificationKey]]
) -> None:
    files = _files(signed["RS256"])
    del files[next(n for n in files if n.endswith("policy.rego"))]
    with pytest.raises(BundleError, match="lacks"):
        read_bundle(_archive(files), verification=keys["RS256"][1])


@pytest.mark.parametrize(
    "signatures",
    [b"{}", b'{"signatures": []}', b'{"signatures": ["a.b.c", "a.b.c"]}', b'{"signatures": [1]}',
     b"not json", b'{"signatures": ["e30.e30.e30"]}'],
)  # fmt: skip
def test_malformed_signatures_are_refused(
    signed: dict[str, bytes], keys: dict[str, tuple[Path, VerificationKey]], signatures: bytes
) -> None:
    files = _files(signed["RS256"]) | {".signatures.json": signatures}
    with pytest.raises(BundleError):
        read_bundle(_archive(files), verification=keys["RS256"][1])


def test_key_id_and_scope_must_match_when_configured(
    signed: dict[str, bytes], keys: dict[str, tuple[Path, VerificationKey]]
) -> None:
    public = keys["RS256"][1].key
    assert read_bundle(signed["RS256"], verification=VerificationKey(public, key_id="default"))
    with pytest.raises(BundleError, match="key id"):
        read_bundle(signed["RS256"], verification=VerificationKey(public, key_id="other"))
    with pytest.raises(BundleError, match="scope"):
        read_bundle(signed["RS256"], verification=VerificationKey(public, scope="write"))


def test_a_directory_reads_like_its_archive(signed: dict[str, bytes], tmp_path: Path) -> None:
    for name, content in _files(signed["RS256"]).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    assert read_bundle(tmp_path) == read_bundle(signed["RS256"])


def _member(name: str, kind: bytes, **fields: Any) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


@pytest.mark.parametrize(
    "member",
    [
        _member("link", tarfile.SYMTYPE, linkname="/etc/passwd"),
        _member("hard", tarfile.LNKTYPE, linkname="policy.wasm"),
        _member("device", tarfile.CHRTYPE),
        _member("fifo", tarfile.FIFOTYPE),
    ],
    ids=["symlink", "hardlink", "device", "fifo"],
)
def test_archive_members_other_than_regular_files_are_refused(
    unsigned: bytes, member: tarfile.TarInfo
) -> None:
    with pytest.raises(BundleError, match="regular files"):
        read_bundle(_archive(_files(unsigned), extra=[member]))


@pytest.mark.parametrize("name", ["../escape/data.json", "a/../../data.json"])
def test_archive_names_outside_the_root_are_refused(unsigned: bytes, name: str) -> None:
    with pytest.raises(BundleError, match="unsafe"):
        read_bundle(_archive(_files(unsigned) | {name: b"{}"}))


def test_a_bundle_larger_than_the_limit_is_refused(unsigned: bytes) -> None:
    with pytest.raises(BundleError, match="larger"):
        read_bundle(unsigned, max_bytes=1000)


def test_a_bundle_without_exactly_one_module_is_refused(unsigned: bytes) -> None:
    files = {k: v for k, v in _files(unsigned).items() if k != "policy.wasm"}
    with pytest.raises(BundleError, match="module"):
        read_bundle(_archive(files))


@settings(max_examples=200)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_raise_only_bundle_errors(raw: bytes) -> None:
    with contextlib.suppress(BundleError):
        read_bundle(raw)


# -- polling --------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[BundleServer]:
    """A running bundle server, stopped afterwards."""
    with BundleServer() as running:
        yield running


@pytest.fixture(scope="module")
def revisions(
    opa_binary: str,
    policy_dir: Path,
    keys: dict[str, tuple[Path, VerificationKey]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, bytes]:
    """Two signed revisions of the bundle."""
    out = tmp_path_factory.mktemp("revisions")
    return {
        revision: _build(
            opa_binary, policy_dir, out / f"{revision}.tar.gz", revision=revision, key=keys["RS256"]
        )
        for revision in ("rev-1", "rev-2")
    }


def _engine_and_poller(
    server: BundleServer, revisions: dict[str, bytes], key: VerificationKey
) -> tuple[EmbeddedEngine, BundlePoller]:
    engine = EmbeddedEngine(read_bundle(revisions["rev-1"], verification=key))
    return engine, BundlePoller(server.url, activate=engine.activate, verification=key, timeout_s=5)


def test_polling_activates_a_new_bundle_and_then_asks_with_its_etag(
    server: BundleServer,
    revisions: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    key = keys["RS256"][1]
    engine, poller = _engine_and_poller(server, revisions, key)
    server.serve(revisions["rev-2"], '"e2"')
    assert poller.poll().outcome == "activated"
    assert engine.revision() == "rev-2"
    assert poller.etag == '"e2"'
    assert poller.poll().outcome == "unchanged"
    assert server.requests[-1]["If-None-Match"] == '"e2"'
    assert "If-None-Match" not in server.requests[0]
    server.serve(revisions["rev-1"], '"e1"')
    result = poller.poll()
    assert (result.outcome, result.revision) == ("activated", "rev-1")
    assert engine.revision() == "rev-1"


def test_a_bundle_that_fails_verification_keeps_the_last_good_one(
    server: BundleServer,
    revisions: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    key = keys["RS256"][1]
    engine, poller = _engine_and_poller(server, revisions, key)
    files = _files(revisions["rev-2"])
    files["data.json"] = files["data.json"].replace(b"1.50", b"1000")
    server.serve(_archive(files), '"forged"')
    result = poller.poll()
    assert result.outcome == "failed"
    assert result.error is not None
    assert engine.revision() == "rev-1"
    assert str(engine.evaluate_sync(ENTRYPOINT, b"{}").value["limit"]) == "1.50"
    # The forged ETag is not remembered: the next poll downloads again.
    server.serve(revisions["rev-2"], '"e2"')
    assert poller.poll().outcome == "activated"
    assert "If-None-Match" not in server.requests[-1]


def test_a_bundle_the_engine_refuses_keeps_the_last_good_one(
    server: BundleServer, revisions: dict[str, bytes]
) -> None:
    engine = EmbeddedEngine(read_bundle(revisions["rev-1"]))
    poller = BundlePoller(server.url, activate=engine.activate)
    files = _files(revisions["rev-2"])
    files["policy.wasm"] = b"\0asm broken"
    server.serve(_archive(files), '"broken"')
    assert poller.poll().outcome == "failed"
    assert engine.revision() == "rev-1"


@pytest.mark.parametrize("status", [404, 500, 503])
def test_a_server_error_keeps_the_last_good_bundle(
    server: BundleServer,
    revisions: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
    status: int,
) -> None:
    engine, poller = _engine_and_poller(server, revisions, keys["RS256"][1])
    server.status = status
    result = poller.poll()
    assert result.outcome == "failed"
    assert engine.revision() == "rev-1"


def test_an_unreachable_server_keeps_the_last_good_bundle(
    revisions: dict[str, bytes], keys: dict[str, tuple[Path, VerificationKey]]
) -> None:
    stopped = BundleServer()
    stopped.close()
    engine, poller = _engine_and_poller(stopped, revisions, keys["RS256"][1])
    assert poller.poll().outcome == "failed"
    assert engine.revision() == "rev-1"


def test_an_oversized_download_is_refused(
    server: BundleServer, revisions: dict[str, bytes]
) -> None:
    engine = EmbeddedEngine(read_bundle(revisions["rev-1"]))
    poller = BundlePoller(server.url, activate=engine.activate, max_bytes=1000)
    server.serve(revisions["rev-2"], '"e2"')
    assert poller.poll().outcome == "failed"
    assert engine.revision() == "rev-1"


def test_only_http_urls_are_polled() -> None:
    with pytest.raises(ValueError, match="http"):
        BundlePoller("file:///etc/passwd", activate=lambda bundle: None)


def test_bundle_values_compare_by_content(unsigned: bytes) -> None:
    assert isinstance(read_bundle(unsigned), Bundle)
    assert read_bundle(unsigned) == read_bundle(unsigned)


# -- an engine following a bundle server ----------------------------------------------------

LIMITS: Final = {"rev-1": "1.50", "rev-2": "2.50", "rev-3": "3.50"}


@pytest.fixture(scope="module")
def releases(
    opa_binary: str,
    keys: dict[str, tuple[Path, VerificationKey]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, bytes]:
    """Three revisions whose data differ (``limit``), signed by opa with the RS256 key;
    ``rev-2-unsigned`` and ``rev-2-other-key`` are rev-2 unsigned and signed with another key,
    and ``rev-1-republished`` names revision rev-1 over rev-3's contents."""
    out = tmp_path_factory.mktemp("releases")
    built: dict[str, bytes] = {}
    other_private, other_public = pem_pair()
    (out / "other.pem").write_bytes(other_private)
    other = (out / "other.pem", VerificationKey(other_public, "RS256"))
    for revision, limit in LIMITS.items():
        root = out / revision
        (root / "signed" / "deep").mkdir(parents=True)
        (root / "signed" / "policy.rego").write_text(POLICY)
        (root / "signed" / "data.json").write_text(DATA.replace("1.50", limit))
        (root / "signed" / "deep" / "data.json").write_text(DEEP_DATA)
        built[revision] = _build(
            opa_binary, root, out / f"{revision}.tar.gz", revision=revision, key=keys["RS256"]
        )
    built["rev-2-unsigned"] = _build(opa_binary, out / "rev-2", out / "u.tar.gz", revision="rev-2")
    built["rev-2-other-key"] = _build(
        opa_binary, out / "rev-2", out / "o.tar.gz", revision="rev-2", key=other
    )
    built["rev-1-republished"] = _build(
        opa_binary, out / "rev-3", out / "r.tar.gz", revision="rev-1", key=keys["RS256"]
    )
    return built


def _limit(engine: EmbeddedEngine) -> str:
    return str(engine.evaluate_sync(ENTRYPOINT, b"{}").value["limit"])


def _follow(server: BundleServer, key: VerificationKey, **options: Any) -> EmbeddedEngine:
    # A long interval: the tests poll with poll_now(), except where the thread is the point.
    options.setdefault("poll_interval_s", 3600)
    options.setdefault("download_timeout_s", 5)
    return EmbeddedEngine.from_bundle_server(server.url, verification=key, **options)


def _rounds(server: BundleServer, count: int) -> None:
    # The poller asks again only once it has acted on the previous answer. Of `count` more
    # answered requests, the first may have been asked before the change, the second was
    # asked after it, and a third answered means the poller acted on the second.
    assert server.wait_for_requests(server.answered + count)


def test_an_engine_follows_its_bundle_server_to_each_new_signed_revision(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    with _follow(server, keys["RS256"][1], poll_interval_s=0.01) as engine:
        assert (engine.revision(), _limit(engine)) == ("rev-1", "1.50")
        assert engine.polling
        server.serve(releases["rev-2"], '"e2"')
        _rounds(server, 3)
        assert (engine.revision(), _limit(engine)) == ("rev-2", "2.50")
        assert engine.last_poll is not None
        assert engine.last_poll.outcome in ("activated", "unchanged")
        # Unchanged bundles are asked for with their ETag and answered 304.
        _rounds(server, 1)
        assert server.requests[-1]["If-None-Match"] == '"e2"'
        assert engine.last_poll.outcome == "unchanged"
        engine.stop_polling()
        assert not engine.polling
    assert engine.identity == f"embedded:{server.url}"


@pytest.mark.parametrize("forged", ["rev-2-unsigned", "rev-2-other-key", "tampered", "junk"])
def test_a_bundle_that_fails_verification_on_the_server_keeps_the_last_good_one(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
    forged: str,
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    with _follow(server, keys["RS256"][1]) as engine:
        if forged == "tampered":
            files = _files(releases["rev-2"])
            files["data.json"] = files["data.json"].replace(b"2.50", b"9000")
            body = _archive(files)
        elif forged == "junk":
            body = b"not a bundle at all"
        else:
            body = releases[forged]
        server.serve(body, '"forged"')
        result = engine.poll_now()
        assert result.outcome == "failed"
        assert result.error is not None
        assert result.error.code == "policy_load_error"
        assert (engine.revision(), _limit(engine)) == ("rev-1", "1.50")
        # The refused bundle's ETag is not remembered, and the next good bundle goes in.
        server.serve(releases["rev-2"], '"e2"')
        assert engine.poll_now().outcome == "activated"
        assert server.requests[-1]["If-None-Match"] == '"e1"'

        assert (engine.revision(), _limit(engine)) == ("rev-2", "2.50")


@pytest.mark.parametrize("status", [404, 500, 503])
def test_a_failing_bundle_server_keeps_the_last_good_bundle_and_is_polled_again(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
    status: int,
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    with _follow(server, keys["RS256"][1], poll_interval_s=0.01) as engine:
        server.fail(status)
        _rounds(server, 3)
        assert engine.last_poll is not None
        assert engine.last_poll.outcome == "failed"
        assert _limit(engine) == "1.50"
        server.serve(releases["rev-3"], '"e3"')
        _rounds(server, 3)
        assert (engine.revision(), _limit(engine)) == ("rev-3", "3.50")


@pytest.mark.parametrize("first", ["rev-2-unsigned", "rev-2-other-key"])
def test_an_engine_does_not_start_on_a_bundle_that_fails_verification(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
    first: str,
) -> None:
    server.serve(releases[first], '"e"')
    with pytest.raises(BundleError):
        _follow(server, keys["RS256"][1])


def test_an_engine_does_not_start_without_its_bundle_server(
    releases: dict[str, bytes], keys: dict[str, tuple[Path, VerificationKey]]
) -> None:
    stopped = BundleServer()
    stopped.close()
    with pytest.raises(BundleError):
        _follow(stopped, keys["RS256"][1])


async def test_a_new_revision_from_the_server_is_not_answered_from_cached_decisions(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    with _follow(server, keys["RS256"][1]) as engine:
        cache = DecisionCache(max_ttl=3600)
        decide = CachingAuthorizer(
            lambda document: _limit_decision(engine),
            engine=engine.identity,
            path=ENTRYPOINT,
            revision=engine.revision,
            cache=cache,
        )
        assert (await decide.authorize(_AUTHORIZATION)).reasons == ("1.50",)
        assert (await decide.authorize(_AUTHORIZATION)).reasons == ("1.50",)
        server.serve(releases["rev-2"], '"e2"')
        assert engine.poll_now().outcome == "activated"
        assert (await decide.authorize(_AUTHORIZATION)).reasons == ("2.50",)
        # The same revision name over other contents is a revision of its own too.
        server.serve(releases["rev-1"], '"e1"')
        assert engine.poll_now().outcome == "activated"
        assert (await decide.authorize(_AUTHORIZATION)).reasons == ("1.50",)
        server.serve(releases["rev-1-republished"], '"r1"')
        assert engine.poll_now().outcome == "activated"
        assert engine.revision().startswith("rev-1+sha256:")
        assert (await decide.authorize(_AUTHORIZATION)).reasons == ("3.50",)
        # Hits: the second call, and rev-1 again over the contents its entry was made by.
        assert cache.stats().hits == 2


_AUTHORIZATION: Final = authorization()


async def _limit_decision(engine: EmbeddedEngine) -> Decision:
    return Decision(allowed=True, reasons=(_limit(engine),), cache_ttl=3600)


def test_bundles_swap_between_evaluations_never_within_one(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    with _follow(server, keys["RS256"][1]) as engine:
        mismatched: list[tuple[str | None, str]] = []
        done = threading.Event()

        def evaluate() -> None:
            while not done.is_set():
                answer = engine.evaluate_sync(ENTRYPOINT, b"{}")
                limit = str(answer.value["limit"])
                if answer.revision is None or LIMITS.get(answer.revision) != limit:
                    mismatched.append((answer.revision, limit))

        workers = [threading.Thread(target=evaluate) for _ in range(2)]
        for worker in workers:
            worker.start()
        try:
            for index in range(6):
                revision = ("rev-2", "rev-3", "rev-1")[index % 3]
                server.serve(releases[revision], f'"{index}"')
                assert engine.poll_now().outcome == "activated"
        finally:
            done.set()
            for worker in workers:
                worker.join()
        assert mismatched == []


def test_a_download_slower_than_its_deadline_fails_and_keeps_the_bundle(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    with _follow(server, keys["RS256"][1], download_timeout_s=0.5) as engine:
        server.serve(releases["rev-2"], '"e2"')
        # 4 KiB every 50 ms: every read is in time, the whole (about 2 s) is not.
        server.drip_s, server.drip_bytes = 0.05, 4096
        assert len(releases["rev-2"]) > 12 * 4096
        result = engine.poll_now()
        assert result.outcome == "failed"
        assert result.error is not None
        assert result.error.detail == "TimeoutError"
        assert engine.revision() == "rev-1"


def test_a_reply_that_is_not_http_is_a_failed_poll_not_an_error() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/bundle.tar.gz"

        def garble() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 abc garbage\r\n\r\n")

        replier = threading.Thread(target=garble)
        replier.start()
        result = BundlePoller(url, activate=lambda bundle: None, timeout_s=5).poll()
        replier.join()
    assert result.outcome == "failed"


def test_polling_starts_once_stops_with_close_and_follows_one_server(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    engine = _follow(server, keys["RS256"][1], start=False)
    assert engine.following
    assert not engine.polling
    engine.start_polling()
    engine.start_polling()
    assert engine.polling
    with pytest.raises(ValueError, match="already"):
        engine.follow(server.url)
    engine.stop_polling()
    assert not engine.polling
    engine.start_polling()
    engine.close()
    assert not engine.polling
    with pytest.raises(EngineUnavailableError):
        engine.start_polling()
    unfollowing = EmbeddedEngine(read_bundle(releases["rev-1"]))
    assert not unfollowing.following
    with pytest.raises(BundleError):
        unfollowing.start_polling()
    with pytest.raises(BundleError):
        unfollowing.poll_now()
    with pytest.raises(ValueError, match="positive"):
        unfollowing.follow(server.url, interval_s=0)
    with pytest.raises(ValueError, match="http"):
        unfollowing.follow("file:///etc/passwd")
    unfollowing.close()


def test_credentials_in_a_bundle_url_stay_out_of_the_engine_identity(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    secret_url = server.url + "?token=s3cret#s3cret"
    with EmbeddedEngine.from_bundle_server(
        secret_url, verification=keys["RS256"][1], poll_interval_s=3600
    ) as engine:
        assert "s3cret" not in engine.identity
        assert engine.identity == f"embedded:{server.url}"


# -- credentials and jitter -----------------------------------------------------------------

SECRET: Final = "Bearer s3cret-token"  # noqa: S105 - a test credential


def test_headers_go_to_the_bundle_server_and_not_on_with_a_redirect_elsewhere(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    with BundleServer() as elsewhere:
        elsewhere.serve(releases["rev-1"], '"e1"')
        server.redirect(elsewhere.url)
        with _follow(server, keys["RS256"][1], headers={"Authorization": SECRET}) as engine:
            assert engine.revision() == "rev-1"
        assert server.requests[-1]["Authorization"] == SECRET
        assert elsewhere.requests, "the redirect was not followed"
        assert all("Authorization" not in sent for sent in elsewhere.requests)


def test_the_credentials_stay_out_of_identity_logs_and_errors(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    with _follow(server, keys["RS256"][1], headers={"Authorization": SECRET}) as engine:
        for status in (401, 500):
            server.fail(status)
            with caplog.at_level("DEBUG"):
                result = engine.poll_now()
            assert result.error is not None
            shown = [str(result.error), repr(result.error), str(result.error.detail)]
            shown += [engine.identity, repr(engine), caplog.text]
            assert all("s3cret" not in text for text in shown)
        assert server.requests[-1]["Authorization"] == SECRET
    with pytest.raises(BundleError) as caught:
        _follow(server, keys["RS256"][1], headers={"Authorization": SECRET})
    assert "s3cret" not in f"{caught.value} {caught.value.detail}"


@settings(max_examples=200, deadline=None)
@given(
    interval=st.floats(0.001, 1e6),
    spread=st.none() | st.floats(0, 1e6),
    draw=st.floats(0, 1, exclude_max=True),
)
def test_each_wait_between_polls_is_drawn_between_the_interval_and_its_maximum(
    interval: float, spread: float | None, draw: float
) -> None:
    most = None if spread is None else interval + spread
    delay = poll_delay(interval, most, lambda: draw)
    assert interval <= delay <= (interval if most is None else most)
    if most is not None and most > interval:
        assert delay == interval + (most - interval) * draw


def test_a_jittered_engine_follows_its_bundle_server_to_a_new_revision(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    with _follow(
        server, keys["RS256"][1], poll_interval_s=0.005, poll_max_interval_s=0.02
    ) as engine:
        server.serve(releases["rev-2"], '"e2"')
        _rounds(server, 3)
        assert engine.revision() == "rev-2"


def test_a_maximum_interval_below_the_interval_is_refused(
    server: BundleServer,
    releases: dict[str, bytes],
    keys: dict[str, tuple[Path, VerificationKey]],
) -> None:
    server.serve(releases["rev-1"], '"e1"')
    with pytest.raises(ValueError, match="max_interval_s"):
        _follow(server, keys["RS256"][1], poll_interval_s=2, poll_max_interval_s=1)
