"""Caller authentication: hashed API keys and JWT bearer tokens, unit by unit.

The end-to-end refusals (status 401 over HTTP, no policy asked) are in test_http.py.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest

from gateway.policy import CallerContext
from gateway.server import Authenticator, AuthFailure, parse_config
from gateway.service._auth import jwks_json
from gateway.service._config import AuthConfig
from tests.server.conftest import (
    ALICE,
    API_KEYS,
    AUDIENCE,
    BOB,
    CAROL,
    EC_KID,
    ISSUER,
    RSA_KID,
    JwtKeys,
    b64url,
    claims,
    hmac_token,
    key_digest,
    tampered,
    unsigned_token,
)

SECRET_ENV = "GATEWAY_TEST_JWT_SECRET"  # noqa: S105 - the variable name only
SECRET = "an-hs256-secret-that-is-32-bytes-or-more"  # noqa: S105 - made for these tests


def auth_config(tmp_path: Path, **auth: Any) -> AuthConfig:
    """The ``auth`` part of an otherwise minimal config."""
    return parse_config(
        {
            "engine": {"kind": "opa", "url": "http://127.0.0.1:8181"},
            "audit": {"enabled": False},
            "tools": {"modules": ["m:t"]},
            "auth": auth,
        },
        base=tmp_path,
    ).auth


def demo_keys() -> list[dict[str, Any]]:
    return [{"sha256": key_digest(k), "context": dict(v)} for k, v in API_KEYS.items()]


def hs256_auth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **jwt_options: Any
) -> Authenticator:
    """HS256 with :data:`SECRET` in the environment variable the config names."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    options: dict[str, Any] = {"algorithms": ["HS256"], "secret_env": SECRET_ENV}
    return jwt_auth(tmp_path, **options, **jwt_options)


def jwt_auth(tmp_path: Path, **jwt_options: Any) -> Authenticator:
    options: dict[str, Any] = {"issuer": ISSUER, "audience": AUDIENCE}
    options.update(jwt_options)
    return Authenticator(auth_config(tmp_path, jwt=options))


def refused(authenticator: Authenticator, headers: dict[str, str]) -> AuthFailure:
    with pytest.raises(AuthFailure) as caught:
        authenticator.authenticate(headers)
    return caught.value


# -- API keys -------------------------------------------------------------------------------


def test_each_api_key_stands_for_its_caller_context(tmp_path: Path) -> None:
    authenticator = Authenticator(auth_config(tmp_path, api_keys=demo_keys()))
    for api_key in (ALICE, BOB, CAROL):
        context = authenticator.authenticate({"x-api-key": api_key})
        assert context == CallerContext(dict(API_KEYS[api_key]))


def test_unknown_empty_and_oversized_api_keys_are_refused(tmp_path: Path) -> None:
    authenticator = Authenticator(auth_config(tmp_path, api_keys=demo_keys()))
    for presented, detail in (
        ("demo-key-mallory", "unknown API key"),
        (ALICE[:-1], "unknown API key"),
        (key_digest(ALICE), "unknown API key"),
        ("", "malformed API key"),
        ("k" * 8193, "malformed API key"),
    ):
        failure = refused(authenticator, {"x-api-key": presented})
        assert (failure.code, failure.detail) == ("unauthenticated", detail)


def test_a_non_ascii_api_key_is_hashed_as_utf8(tmp_path: Path) -> None:
    api_key = "schlüssel-🔑"
    authenticator = Authenticator(
        auth_config(
            tmp_path, api_keys=[{"sha256": key_digest(api_key), "context": {"subject": "u"}}]
        )
    )
    assert authenticator.authenticate({"x-api-key": api_key}).get("subject") == "u"
    # A lone surrogate (which no HTTP header can carry) is refused, not a crash.
    assert refused(authenticator, {"x-api-key": "\udcff"}).code == "unauthenticated"


def test_every_stored_key_is_compared_whichever_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    authenticator = Authenticator(auth_config(tmp_path, api_keys=demo_keys()))
    compared: list[bytes] = []
    original: Callable[[bytes, bytes], bool] = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(a)
        return original(a, b)

    monkeypatch.setattr("gateway.service._auth.hmac.compare_digest", counting)
    for presented in (ALICE, CAROL, "nobody"):
        compared.clear()
        with contextlib.suppress(AuthFailure):
            authenticator.authenticate({"x-api-key": presented})
        assert len(compared) == len(API_KEYS), presented


def test_an_api_key_wins_over_an_authorization_header(tmp_path: Path) -> None:
    authenticator = Authenticator(auth_config(tmp_path, api_keys=demo_keys()))
    context = authenticator.authenticate({"x-api-key": BOB, "authorization": "Bearer x.y.z"})
    assert context.get("subject") == "bob"
    # ... and a wrong API key is not rescued by another credential.
    failure = refused(authenticator, {"x-api-key": "wrong", "authorization": "Bearer x"})
    assert failure.detail == "unknown API key"


def test_missing_and_malformed_authorization_headers(tmp_path: Path) -> None:
    authenticator = Authenticator(auth_config(tmp_path, api_keys=demo_keys()))
    assert refused(authenticator, {}).detail == "no credentials"
    for header in ("Basic YWxpY2U6eA==", "Bearer", "Bearer    ", "Token abc", "bearer"):
        failure = refused(authenticator, {"authorization": header})
        assert failure.code == "unauthenticated", header
    # Without JWT configuration no bearer token is accepted at all.
    failure = refused(authenticator, {"authorization": f"Bearer {ALICE}"})
    assert failure.detail == "bearer tokens are not accepted here"


# -- JWT --------------------------------------------------------------------------------------


def test_hs256_with_a_secret_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    authenticator = hs256_auth(tmp_path, monkeypatch)
    token = jwt.encode(claims(), SECRET, "HS256")
    context = authenticator.authenticate({"authorization": f"Bearer {token}"})
    assert context == CallerContext(subject="alice", roles=["reader"], tenant="acme")
    # The scheme is case-insensitive; extra blanks around the token are fine.
    assert authenticator.authenticate({"authorization": f"bearer   {token}"}) == context
    assert refused(authenticator, {"authorization": f"Bearer {tampered(token)}"}).code == (
        "unauthenticated"
    )
    other = jwt.encode(claims(), "another-secret-that-is-also-32-bytes-long", "HS256")
    assert refused(authenticator, {"authorization": f"Bearer {other}"}).code == "unauthenticated"
    hs512 = jwt.encode(claims(), SECRET * 2, "HS512")
    assert refused(authenticator, {"authorization": f"Bearer {hs512}"}).code == "unauthenticated"


def test_rs256_with_a_public_key_file(tmp_path: Path, jwt_keys: JwtKeys) -> None:
    (tmp_path / "public.pem").write_text(jwt_keys.rsa_public_pem(), encoding="utf-8")
    authenticator = jwt_auth(tmp_path, algorithms=["RS256"], public_key_file="public.pem")
    token = jwt.encode(claims(), jwt_keys.rsa_key, "RS256")
    assert authenticator.authenticate({"authorization": f"Bearer {token}"}).get("subject") == (
        "alice"
    )
    for bad in (
        jwt.encode(claims(), jwt_keys.stranger_key, "RS256"),
        jwt.encode(claims(), jwt_keys.ec_key, "ES256"),
        jwt.encode(claims(), jwt_keys.rsa_key, "PS256"),
        hmac_token({"alg": "HS256"}, claims(), jwt_keys.rsa_public_pem().encode()),
        unsigned_token({"alg": "none"}, claims()),
        tampered(token),
    ):
        failure = refused(authenticator, {"authorization": f"Bearer {bad}"})
        assert failure.code == "unauthenticated"


def test_es256_and_rs256_from_a_jwks_file(tmp_path: Path, jwt_keys: JwtKeys) -> None:
    (tmp_path / "jwks.json").write_text(jwt_keys.jwks(), encoding="utf-8")
    authenticator = jwt_auth(tmp_path, algorithms=["RS256", "ES256"], jwks_file="jwks.json")
    for signer, algorithm, kid in (
        (jwt_keys.rsa_key, "RS256", RSA_KID),
        (jwt_keys.ec_key, "ES256", EC_KID),
    ):
        token = jwt.encode(claims(), signer, algorithm, headers={"kid": kid})
        context = authenticator.authenticate({"authorization": f"Bearer {token}"})
        assert context.get("subject") == "alice", algorithm
    # A token whose algorithm does not fit the key its kid names is refused, not a crash.
    for signer, algorithm, kid in (
        (jwt_keys.ec_key, "ES256", RSA_KID),
        (jwt_keys.rsa_key, "RS256", EC_KID),
    ):
        token = jwt.encode(claims(), signer, algorithm, headers={"kid": kid})
        failure = refused(authenticator, {"authorization": f"Bearer {token}"})
        assert failure.code == "unauthenticated", (algorithm, kid)
    # With several keys a token must name one.
    token = jwt.encode(claims(), jwt_keys.rsa_key, "RS256")
    assert refused(authenticator, {"authorization": f"Bearer {token}"}).detail == (
        "unknown signing key"
    )


def test_a_single_key_jwks_accepts_tokens_without_kid(tmp_path: Path, jwt_keys: JwtKeys) -> None:
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(jwt_keys.ec_key.public_key()))
    (tmp_path / "jwks.json").write_text(jwks_json({"only": public}), encoding="utf-8")
    authenticator = jwt_auth(tmp_path, algorithms=["ES256"], jwks_file="jwks.json")
    for headers in ({}, {"kid": "only"}, {"kid": "unknown-kid"}):
        token = jwt.encode(claims(), jwt_keys.ec_key, "ES256", headers=headers)
        assert authenticator.authenticate({"authorization": f"Bearer {token}"}).get("subject")


@pytest.fixture
def hs256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Authenticator:
    return hs256_auth(tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("case", "changes", "code"),
    [
        ("expired", {"exp": -60}, "token_expired"),
        ("expired a second ago", {"exp": -1}, "token_expired"),
        ("wrong audience", {"aud": "another-service"}, "unauthenticated"),
        ("audience list without ours", {"aud": ["a", "b"]}, "unauthenticated"),
        ("wrong issuer", {"iss": "https://evil.test"}, "unauthenticated"),
        ("missing exp", {"exp": None}, "unauthenticated"),
        ("missing iss", {"iss": None}, "unauthenticated"),
        ("missing aud", {"aud": None}, "unauthenticated"),
        ("missing sub", {"sub": None}, "unauthenticated"),
        ("empty sub", {"sub": ""}, "unauthenticated"),
        ("sub not a string", {"sub": 42}, "unauthenticated"),
        ("not yet valid", {"nbf": 600}, "unauthenticated"),
        ("exp not a number", {"exp": "tomorrow"}, "unauthenticated"),
    ],
)
def test_invalid_claims_are_refused(
    hs256: Authenticator, case: str, changes: dict[str, object], code: str
) -> None:
    now = int(time.time())
    values = {
        k: (now + v if k in ("exp", "nbf") and isinstance(v, int) else v)
        for k, v in changes.items()
    }
    token = jwt.encode(claims(**values), SECRET, "HS256")
    failure = refused(hs256, {"authorization": f"Bearer {token}"})
    assert failure.code == code, (case, failure.detail)


def test_an_audience_list_with_ours_is_accepted(hs256: Authenticator) -> None:
    token = jwt.encode(claims(aud=["other", AUDIENCE]), SECRET, "HS256")
    assert hs256.authenticate({"authorization": f"Bearer {token}"}).get("subject") == "alice"


def test_alg_none_is_refused_in_every_spelling(hs256: Authenticator) -> None:
    for alg in ("none", "None", "NONE", "nOnE"):
        token = unsigned_token({"alg": alg, "typ": "JWT"}, claims())
        assert refused(hs256, {"authorization": f"Bearer {token}"}).code == "unauthenticated"
        # Also with a signature that would be right for HS256.
        forged = hmac_token({"alg": alg, "typ": "JWT"}, claims(), SECRET.encode())
        assert refused(hs256, {"authorization": f"Bearer {forged}"}).code == "unauthenticated"


def test_garbage_tokens_are_refused(hs256: Authenticator) -> None:
    for token in (
        "not-a-jwt",
        "a.b.c",
        "a.b",
        "....",
        b64url(b'{"alg":"HS256"}') + ".e30.",
        b64url(b'{"alg":"HS256","kid":["x"]}') + ".e30.sig",
        "x" * 9000,
    ):
        assert refused(hs256, {"authorization": f"Bearer {token}"}).code == "unauthenticated"


def test_leeway_accepts_recently_expired_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    authenticator = hs256_auth(tmp_path, monkeypatch, leeway_s=30)
    now = int(time.time())
    recent = jwt.encode(claims(exp=now - 10), SECRET, "HS256")
    assert authenticator.authenticate({"authorization": f"Bearer {recent}"}).get("subject")
    old = jwt.encode(claims(exp=now - 60), SECRET, "HS256")
    assert refused(authenticator, {"authorization": f"Bearer {old}"}).code == "token_expired"


def test_claims_are_mapped_to_the_caller_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    authenticator = hs256_auth(
        tmp_path,
        monkeypatch,
        claims={"subject": "email", "roles": "groups", "tenant": "org", "session": "sid"},
    )
    token = jwt.encode(
        claims(email="a@acme.test", groups=["reader"], org="acme", sid="s-1", extra="dropped"),
        SECRET,
        "HS256",
    )
    context = authenticator.authenticate({"authorization": f"Bearer {token}"})
    assert context == CallerContext(
        subject="a@acme.test", roles=["reader"], tenant="acme", session="s-1"
    )
    # Claims that are absent are simply not in the context.
    minimal = jwt.encode(claims(email="b@acme.test", roles=None, tenant=None), SECRET, "HS256")
    assert authenticator.authenticate({"authorization": f"Bearer {minimal}"}) == CallerContext(
        subject="b@acme.test"
    )
    # The default mapping's "sub" is not the subject here.
    no_email = jwt.encode(claims(), SECRET, "HS256")
    assert refused(authenticator, {"authorization": f"Bearer {no_email}"}).detail == (
        "token has no subject"
    )


def test_claims_that_are_no_valid_context_are_refused(hs256: Authenticator) -> None:
    # Python's json (which PyJWT uses) reads NaN; a caller context never holds it.
    payload = json.dumps(claims()).replace('"roles": ["reader"]', '"roles": NaN')
    assert "NaN" in payload
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(payload.encode())
    signature = b64url(hmac.new(SECRET.encode(), f"{header}.{body}".encode(), "sha256").digest())
    failure = refused(hs256, {"authorization": f"Bearer {header}.{body}.{signature}"})
    assert failure.code == "unauthenticated"
