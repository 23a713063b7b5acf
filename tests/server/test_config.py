"""The TOML configuration: every invalid key is named, valid files load, paths resolve."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.server import ConfigError, GatewayConfig, api_key_digest, load_config, parse_config
from gateway.service._config import PUBLISHED_KEYS, check_listener, import_tools
from tests.server.conftest import (
    ALICE,
    BUNDLE,
    EXAMPLE_CONFIG,
    POLICIES,
    JwtKeys,
    key_digest,
)

Data = dict[str, Any]


AUDIT_KEY = b"a-test-audit-key-of-32-bytes-ok!"


def valid(tmp_path: Path) -> Data:
    """A minimal valid configuration (embedded engine, a keyed trail, one API key)."""
    (tmp_path / "audit.key").write_bytes(AUDIT_KEY + b"\n")
    return {
        "engine": {"kind": "embedded", "policies": str(POLICIES)},
        "audit": {"path": str(tmp_path / "audit.jsonl"), "key_file": str(tmp_path / "audit.key")},
        "auth": {"api_keys": [{"sha256": key_digest(ALICE), "context": {"subject": "alice"}}]},
        "tools": {"modules": ["examples.example_tools:TOOLS"]},
    }


def at(data: Data, dotted: str, value: object) -> Data:
    """``data`` with the value at a dotted path set (``...`` deletes it)."""
    changed = copy.deepcopy(data)
    *parents, last = dotted.split(".")
    node: Any = changed
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if value is ...:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return changed


Change = Callable[[Data], Data]


def jwt_table(**values: object) -> Change:
    def change(data: Data) -> Data:
        base: Data = {"algorithms": ["RS256"], "issuer": "i", "audience": "a"}
        base.update(values)
        return at(data, "auth.jwt", {k: v for k, v in base.items() if v is not None})

    return change


def setting(dotted: str, value: object) -> Change:
    return lambda data: at(data, dotted, value)


A_DIGEST = "a" * 64

INVALID: list[tuple[str, Change, str]] = [
    # (case, change to a valid config, the key the message must start with)
    ("unknown top-level key", setting("listen", "x"), "listen: unknown key"),
    ("engine not a table", setting("engine", "embedded"), "engine: must be a table"),
    ("engine unknown key", setting("engine.policy", "x"), "engine.policy: unknown key"),
    ("engine.kind unknown", setting("engine.kind", "wasm"), "engine.kind: "),
    ("engine.kind not a string", setting("engine.kind", 1), "engine.kind: "),
    ("engine without policy", setting("engine.policies", ...), "engine.bundle: "),
    ("engine.bundle and policies", setting("engine.bundle", str(BUNDLE)), "engine.bundle: "),
    (
        "engine.bundle missing file",
        lambda d: at(at(d, "engine.policies", ...), "engine.bundle", "/no/such.tar.gz"),
        "engine.bundle: ",
    ),
    ("engine.bundle a number", setting("engine.bundle", 3), "engine.bundle: "),
    (
        "engine.opa_binary for a bundle",
        lambda d: at(
            at(at(d, "engine.policies", ...), "engine.bundle", str(BUNDLE)),
            "engine.opa_binary",
            "/usr/bin/opa",
        ),
        "engine.opa_binary: ",
    ),
    (
        "engine.verification for a directory",
        setting("engine.verification", {"key_file": str(BUNDLE)}),
        "engine.verification: ",
    ),
    (
        "engine.verification without a key",
        lambda d: at(
            at(at(d, "engine.policies", ...), "engine.bundle", str(BUNDLE)),
            "engine.verification",
            {"algorithm": "RS256"},
        ),
        "engine.verification.key_file: ",
    ),
    (
        "engine.verification unreadable key",
        lambda d: at(
            at(at(d, "engine.policies", ...), "engine.bundle", str(BUNDLE)),
            "engine.verification",
            {"key_file": "/no/such.pem"},
        ),
        "engine.verification.key_file: ",
    ),
    (
        "engine.verification unknown algorithm",
        lambda d: at(
            at(at(d, "engine.policies", ...), "engine.bundle", str(BUNDLE)),
            "engine.verification",
            {"key_file": str(BUNDLE), "algorithm": "none"},
        ),
        "engine.verification.algorithm: ",
    ),
    (
        "engine.verification unknown key",
        lambda d: at(
            at(at(d, "engine.policies", ...), "engine.bundle", str(BUNDLE)),
            "engine.verification",
            {"key_file": str(BUNDLE), "kid": "x"},
        ),
        "engine.verification.kid: unknown key",
    ),
    (
        "engine.policies not a folder",
        setting("engine.policies", "/no/such/dir"),
        "engine.policies: ",
    ),
    ("engine.policies a number", setting("engine.policies", 3), "engine.policies: "),
    ("engine.url missing for opa", setting("engine.kind", "opa"), "engine.url: "),
    (
        "engine.url not http",
        lambda d: at(at(d, "engine.kind", "opa"), "engine.url", "unix:///opa.sock"),
        "engine.url: ",
    ),
    ("engine.timeout_s zero", setting("engine.timeout_s", 0), "engine.timeout_s: "),
    ("engine.timeout_s negative", setting("engine.timeout_s", -1.5), "engine.timeout_s: "),
    ("engine.timeout_s text", setting("engine.timeout_s", "1"), "engine.timeout_s: "),
    ("engine.timeout_s bool", setting("engine.timeout_s", True), "engine.timeout_s: "),
    (
        "engine.decision_path invalid",
        setting("engine.decision_path", "a b/c"),
        "engine.decision_path: ",
    ),
    ("engine.decision_path empty", setting("engine.decision_path", ""), "engine.decision_path: "),
    ("cache unknown key", setting("cache.size", 1), "cache.size: unknown key"),
    ("cache.enabled not bool", setting("cache.enabled", "yes"), "cache.enabled: "),
    ("cache.max_entries zero", setting("cache.max_entries", 0), "cache.max_entries: "),
    ("cache.max_entries float", setting("cache.max_entries", 1.5), "cache.max_entries: "),
    ("cache.max_ttl_s negative", setting("cache.max_ttl_s", -1), "cache.max_ttl_s: "),
    ("audit unknown key", setting("audit.file", "x"), "audit.file: unknown key"),
    ("audit.path missing", setting("audit.path", ...), "audit.path: "),
    ("audit.fsync unknown", setting("audit.fsync", "sometimes"), "audit.fsync: "),
    ("audit.fsync not text", setting("audit.fsync", True), "audit.fsync: "),
    ("audit.enabled not bool", setting("audit.enabled", 1), "audit.enabled: "),
    ("audit.max_bytes float", setting("audit.max_bytes", 1.5), "audit.max_bytes: "),
    (
        "audit.key_env unset",
        lambda d: at(at(d, "audit.key_file", ...), "audit.key_env", "GATEWAY_TEST_UNSET_KEY"),
        "audit.key_env: ",
    ),
    ("audit.mask_keys not a list", setting("audit.mask_keys", "iban"), "audit.mask_keys: "),
    (
        "audit.mask_pointers not pointers",
        setting("audit.mask_pointers", ["iban"]),
        "audit.mask_pointers: ",
    ),
    ("auth missing", setting("auth", ...), "auth: "),
    ("auth empty", setting("auth", {}), "auth: "),
    ("auth not a table", setting("auth", "keys"), "auth: must be a table"),
    ("auth unknown key", setting("auth.saml", {}), "auth.saml: unknown key"),
    ("auth.api_keys not a list", setting("auth.api_keys", "k"), "auth.api_keys: "),
    ("auth.api_keys entry not a table", setting("auth.api_keys", ["k"]), "auth.api_keys[0]: "),
    ("sha256 upper case", setting("auth.api_keys.0.sha256", "A" * 64), "auth.api_keys[0].sha256: "),
    ("sha256 too short", setting("auth.api_keys.0.sha256", "a" * 63), "auth.api_keys[0].sha256: "),
    ("sha256 not hex", setting("auth.api_keys.0.sha256", "g" * 64), "auth.api_keys[0].sha256: "),
    ("sha256 the plain key", setting("auth.api_keys.0.sha256", ALICE), "auth.api_keys[0].sha256: "),
    ("sha256 missing", setting("auth.api_keys.0.sha256", ...), "auth.api_keys[0].sha256: "),
    ("api key unknown member", setting("auth.api_keys.0.key", ALICE), "auth.api_keys[0].key: "),
    ("context missing", setting("auth.api_keys.0.context", ...), "auth.api_keys[0].context: "),
    (
        "context without subject",
        setting("auth.api_keys.0.context", {"roles": []}),
        "auth.api_keys[0].context: ",
    ),
    (
        "second key invalid",
        lambda d: at(d, "auth.api_keys", [*d["auth"]["api_keys"], {"sha256": "x", "context": {}}]),
        "auth.api_keys[1].sha256: ",
    ),
    ("jwt not a table", setting("auth.jwt", "yes"), "auth.jwt: must be a table"),
    ("jwt without a key source", jwt_table(), "auth.jwt: "),
    ("jwt unknown key", jwt_table(secret="s"), "auth.jwt.secret: unknown key"),  # noqa: S106
    (
        "jwt algorithm none",
        jwt_table(algorithms=["none"], public_key_file="k.pem"),
        "auth.jwt.algorithms: ",
    ),
    ("jwt algorithms not a list", jwt_table(algorithms="RS256"), "auth.jwt.algorithms: "),
    (
        "jwt public key file missing",
        jwt_table(public_key_file="missing.pem"),
        "auth.jwt.public_key_file: ",
    ),
    ("jwt jwks file missing", jwt_table(jwks_file="missing.json"), "auth.jwt.jwks_file: "),
    (
        "jwt secret env unset",
        jwt_table(algorithms=["HS256"], secret_env="GATEWAY_TEST_UNSET"),  # noqa: S106
        "auth.jwt.secret_env: ",
    ),
    ("jwt two key sources", jwt_table(public_key_file="k.pem", jwks_file="k.pem"), "auth.jwt: "),
    (
        "jwt HS256 with a public key",
        jwt_table(algorithms=["HS256"], public_key_file="k.pem"),
        "auth.jwt.algorithms: ",
    ),
    ("jwt issuer missing", jwt_table(issuer=None, public_key_file="k.pem"), "auth.jwt.issuer: "),
    (
        "jwt audience missing",
        jwt_table(audience=None, public_key_file="k.pem"),
        "auth.jwt.audience: ",
    ),
    ("jwt issuer not text", jwt_table(issuer=3, public_key_file="k.pem"), "auth.jwt.issuer: "),
    (
        "jwt claims not names",
        jwt_table(claims={"subject": 1}, public_key_file="k.pem"),
        "auth.jwt.claims: ",
    ),
    ("jwt leeway text", jwt_table(leeway_s="5", public_key_file="k.pem"), "auth.jwt.leeway_s: "),
    ("server unknown key", setting("server.address", "x"), "server.address: unknown key"),
    ("server.port too large", setting("server.port", 65536), "server.port: "),
    ("server.port negative", setting("server.port", -1), "server.port: "),
    ("server.port text", setting("server.port", "8080"), "server.port: "),
    ("server.port bool", setting("server.port", True), "server.port: "),
    ("server.host not text", setting("server.host", 127), "server.host: "),
    ("server.max_body_bytes tiny", setting("server.max_body_bytes", 10), "server.max_body_bytes: "),
    ("tools missing", setting("tools", ...), "tools.modules: "),
    ("tools.modules empty", setting("tools.modules", []), "tools.modules: "),
    ("tools.modules not a list", setting("tools.modules", "a:b"), "tools.modules: "),
    (
        "tools.modules without attribute",
        setting("tools.modules", ["example_tools"]),
        "tools.modules: ",
    ),
    ("tools.modules two colons", setting("tools.modules", ["a:b:c"]), "tools.modules: "),
    ("tools unknown key", setting("tools.paths", []), "tools.paths: unknown key"),
]


@pytest.mark.parametrize(("case", "change", "prefix"), INVALID, ids=[c[0] for c in INVALID])
def test_an_invalid_config_names_its_key(
    tmp_path: Path, jwt_keys: JwtKeys, case: str, change: Change, prefix: str
) -> None:
    (tmp_path / "k.pem").write_text(jwt_keys.rsa_public_pem(), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        parse_config(change(valid(tmp_path)), base=tmp_path)
    assert str(caught.value).startswith(prefix), (case, str(caught.value))
    assert caught.value.code == "invalid_config"


def test_the_minimal_config_loads_with_defaults(tmp_path: Path) -> None:
    config = parse_config(valid(tmp_path), base=tmp_path)
    assert isinstance(config, GatewayConfig)
    assert config.engine.kind == "embedded"
    assert config.engine.decision_path == "gateway/authz/decision"
    assert config.engine.timeout_s == 1.0
    assert config.cache.enabled is True
    assert config.audit.fsync == "always"
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 8080
    assert config.server.max_body_bytes == 2 * 1024 * 1024
    assert config.auth.jwt is None
    assert config.auth.api_keys[0].sha256 == key_digest(ALICE)
    assert config.auth.api_keys[0].context == {"subject": "alice"}
    assert config.tools == ("examples.example_tools:TOOLS",)


def test_a_full_config_file_loads(tmp_path: Path, jwt_keys: JwtKeys) -> None:
    (tmp_path / "jwks.json").write_text(jwt_keys.jwks(), encoding="utf-8")
    (tmp_path / "audit.key").write_bytes(AUDIT_KEY)
    path = tmp_path / "gateway.toml"
    path.write_text(
        f"""
[engine]
kind = "opa"
url = "http://127.0.0.1:8181"
timeout_s = 0.5
revision_interval_s = 2
decision_path = "data.gateway.authz.decision"

[cache]
enabled = false
max_entries = 10
max_ttl_s = 5
default_ttl_s = 1.5

[audit]
enabled = true
path = "audit/trail.jsonl"
fsync = "batch"
max_bytes = 1048576
mask_keys = ["iban"]
mask_pointers = ["/card/number"]

key_file = "audit.key"

[server]
host = "0.0.0.0"
port = 0
max_body_bytes = 4096

[[auth.api_keys]]
sha256 = "{api_key_digest("a key only this test knows")}"
context = {{ subject = "alice", roles = ["reader"], tenant = "acme" }}

[auth.jwt]
algorithms = ["RS256", "ES256"]
jwks_file = "jwks.json"
issuer = "https://issuer.test"
audience = "gateway"
leeway_s = 5
claims = {{ subject = "email", roles = "groups" }}

[tools]
modules = ["examples.example_tools:TOOLS", "tests.server.conftest:TEST_TOOLS"]
""",
        encoding="utf-8",
    )
    config = load_config(path)
    assert config.source == path
    assert config.engine.kind == "opa"
    assert config.engine.url == "http://127.0.0.1:8181"
    assert config.engine.timeout_s == 0.5
    assert config.engine.decision_path == "data.gateway.authz.decision"
    assert (config.cache.enabled, config.cache.max_entries, config.cache.default_ttl_s) == (
        False,
        10,
        1.5,
    )
    assert config.audit.path == tmp_path / "audit" / "trail.jsonl"
    assert config.audit.fsync == "batch"
    assert config.audit.mask_pointers == ("/card/number",)
    assert (config.audit.key_file, config.audit.key) == (tmp_path / "audit.key", AUDIT_KEY)
    assert (config.server.host, config.server.port, config.server.max_body_bytes) == (
        "0.0.0.0",  # noqa: S104 - a value read back from the file
        0,
        4096,
    )
    assert config.auth.jwt is not None
    assert config.auth.jwt.algorithms == ("RS256", "ES256")
    assert config.auth.jwt.jwks == jwt_keys.jwks()
    assert config.auth.jwt.leeway_s == 5.0
    assert config.auth.jwt.claims == {"subject": "email", "roles": "groups"}
    assert len(config.tools) == 2


def test_the_shipped_example_config_loads(tmp_path: Path) -> None:
    config = load_config(_shipped(tmp_path, "examples"))
    # The committed bundle (through the symlink beside the copy): no opa binary needed.
    assert config.engine.bundle == BUNDLE
    assert config.engine.policies is None
    assert config.audit.path == tmp_path / "repo" / ".demo" / "audit" / "audit.jsonl"
    assert len(config.auth.api_keys) == 3
    digests = {key.sha256: key.context for key in config.auth.api_keys}
    assert digests[api_key_digest("demo-key-bob")] == {
        "subject": "bob",
        "roles": ["clerk"],
        "tenant": "globex",
    }


def test_relative_paths_resolve_against_the_config_folder(
    tmp_path: Path, jwt_keys: JwtKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "etc" / "gateway"
    (folder / "rego").mkdir(parents=True)
    (folder / "rego" / "p.rego").write_text("package p\n", encoding="utf-8")
    (folder / "keys").mkdir()
    (folder / "keys" / "jwt.pem").write_text(jwt_keys.rsa_public_pem(), encoding="utf-8")
    (folder / "keys" / "audit.key").write_bytes(AUDIT_KEY)
    (folder / "gateway.toml").write_text(
        f"""
[engine]
policies = "rego"
[audit]
path = "../../var/audit.jsonl"
key_file = "keys/audit.key"
[auth.jwt]
public_key_file = "keys/jwt.pem"
issuer = "i"
audience = "a"
[[auth.api_keys]]
sha256 = "{key_digest(ALICE)}"
context = {{ subject = "alice" }}
[tools]
modules = ["m:t"]
""",
        encoding="utf-8",
    )
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    config = load_config(os.path.relpath(folder / "gateway.toml", elsewhere))
    assert config.engine.policies == folder / "rego"
    assert config.audit.path == tmp_path / "var" / "audit.jsonl"
    assert (config.audit.key_file, config.audit.key) == (folder / "keys" / "audit.key", AUDIT_KEY)
    assert config.auth.jwt is not None
    assert config.auth.jwt.public_key == jwt_keys.rsa_public_pem()
    assert config.source == folder / "gateway.toml"


def test_unreadable_or_broken_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^config: cannot read"):
        load_config(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text('[engine\nkind = "embedded"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^config: .* is not valid TOML"):
        load_config(broken)


def test_secrets_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_TEST_SECRET", "s3cret-s3cret-s3cret-s3cret-s3cret")
    monkeypatch.setenv("GATEWAY_TEST_AUDIT_KEY", "audit-key-from-the-environment")
    with_hmac = jwt_table(algorithms=["HS256", "HS512"], secret_env="GATEWAY_TEST_SECRET")  # noqa: S106
    keyed = at(
        at(valid(tmp_path), "audit.key_file", ...), "audit.key_env", "GATEWAY_TEST_AUDIT_KEY"
    )
    data = with_hmac(keyed)
    config = parse_config(data, base=tmp_path)
    assert config.auth.jwt is not None
    assert config.auth.jwt.secret == b"s3cret-s3cret-s3cret-s3cret-s3cret"
    assert config.audit.key_env == "GATEWAY_TEST_AUDIT_KEY"
    assert config.audit.key == b"audit-key-from-the-environment"
    monkeypatch.setenv("GATEWAY_TEST_SECRET", "")
    with pytest.raises(ConfigError, match=r"^auth\.jwt\.secret_env: "):
        parse_config(data, base=tmp_path)


def test_jwt_alone_is_enough_authentication(tmp_path: Path, jwt_keys: JwtKeys) -> None:
    (tmp_path / "k.pem").write_text(jwt_keys.rsa_public_pem(), encoding="utf-8")
    data = jwt_table(public_key_file="k.pem")(at(valid(tmp_path), "auth.api_keys", ...))
    config = parse_config(data, base=tmp_path)
    assert config.auth.api_keys == ()
    assert config.auth.jwt is not None
    assert config.auth.jwt.algorithms == ("RS256",)


def test_api_key_digest_is_the_sha256_hex() -> None:
    assert api_key_digest("demo-key-alice") == (
        "f80024220afd493b4d9592af870de7afe98061992d28fdb75480c9b717783fa2"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gateway_no_such_module:TOOLS", "tools.modules: cannot import 'gateway_no_such_module'"),
        ("examples.example_tools:NOPE", "tools.modules: 'examples.example_tools' has no attribute"),
        (
            "tests.server.test_config:A_DIGEST",
            "tools.modules: 'tests.server.test_config:A_DIGEST' is",
        ),
        (
            "tests.server.test_config:INVALID",
            "tools.modules: 'tests.server.test_config:INVALID'[0]",
        ),
    ],
)
def test_tool_imports_that_fail_name_tools_modules(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        import_tools(spec)
    assert str(caught.value).startswith(message), str(caught.value)


def test_tool_imports_accept_a_tool_or_a_list() -> None:
    assert [t.definition().name for t in import_tools("examples.example_tools:add")] == ["add"]
    assert len(import_tools("examples.example_tools:TOOLS")) == 6
    assert [t.definition().name for t in import_tools("tests.server.conftest:TEST_TOOLS")] == [
        "echo",
        "fail",
        "boom",
    ]


# -- keyed audit chains ----------------------------------------------------------------------


def test_an_enabled_trail_without_a_key_is_refused_unless_explicitly_unkeyed(
    tmp_path: Path,
) -> None:
    unkeyed = at(valid(tmp_path), "audit.key_file", ...)

    with pytest.raises(ConfigError, match=r"^audit\.key_env: the audit chain must be keyed"):
        parse_config(unkeyed, base=tmp_path)
    accepted = parse_config(at(unkeyed, "audit.unkeyed", True), base=tmp_path)
    disabled = parse_config(at(unkeyed, "audit.enabled", False), base=tmp_path)

    assert (accepted.audit.unkeyed, accepted.audit.key) == (True, None)
    assert disabled.audit.key is None


def test_the_key_file_is_read_with_its_surrounding_white_space_dropped(tmp_path: Path) -> None:
    config = parse_config(valid(tmp_path), base=tmp_path)

    assert (config.audit.key_file, config.audit.key) == (tmp_path / "audit.key", AUDIT_KEY)
    assert AUDIT_KEY not in repr(config).encode()


KEY_ERRORS: list[tuple[str, Change, str]] = [
    (
        "both sources",
        setting("audit.key_env", "GATEWAY_TEST_AUDIT_KEY_BOTH"),
        "audit.key_file: set key_env or key_file",
    ),
    ("unkeyed and a key", setting("audit.unkeyed", True), "audit.unkeyed: contradicts"),
    (
        "generate without a file",
        lambda d: at(at(d, "audit.key_file", ...), "audit.generate_key", True),
        "audit.generate_key: needs key_file",
    ),
    ("missing file", setting("audit.key_file", "/no/such/key"), "audit.key_file: cannot read"),
    ("unkeyed not bool", setting("audit.unkeyed", "yes"), "audit.unkeyed: must be bool"),
    ("key_file not text", setting("audit.key_file", 1), "audit.key_file: must be str"),
]


@pytest.mark.parametrize(("case", "change", "prefix"), KEY_ERRORS, ids=[c[0] for c in KEY_ERRORS])
def test_an_invalid_audit_key_setting_names_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, change: Change, prefix: str
) -> None:
    monkeypatch.setenv("GATEWAY_TEST_AUDIT_KEY_BOTH", "x" * 32)
    with pytest.raises(ConfigError) as caught:
        parse_config(change(valid(tmp_path)), base=tmp_path)
    assert str(caught.value).startswith(prefix), (case, str(caught.value))


@pytest.mark.parametrize("source", ["file", "env"])
def test_a_short_audit_key_is_refused_without_showing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    (tmp_path / "short.key").write_bytes(b"shortkey123")
    monkeypatch.setenv("GATEWAY_TEST_SHORT_KEY", "shortkey123")
    data = valid(tmp_path)
    if source == "file":
        data = at(data, "audit.key_file", str(tmp_path / "short.key"))
    else:
        data = at(at(data, "audit.key_file", ...), "audit.key_env", "GATEWAY_TEST_SHORT_KEY")

    with pytest.raises(ConfigError, match="shorter than 16 bytes") as caught:
        parse_config(data, base=tmp_path)
    assert "shortkey123" not in str(caught.value)


def test_generate_key_makes_a_private_random_key_once_and_then_reads_it(tmp_path: Path) -> None:
    data = at(valid(tmp_path), "audit.key_file", str(tmp_path / "demo" / "audit.key"))
    data = at(data, "audit.generate_key", True)

    first = parse_config(data, base=tmp_path).audit.key
    second = parse_config(data, base=tmp_path).audit.key
    other = parse_config(
        at(data, "audit.key_file", str(tmp_path / "other.key")), base=tmp_path
    ).audit.key

    assert first is not None
    assert first == second != other
    assert len(first) == 64
    assert (tmp_path / "demo" / "audit.key").stat().st_mode & 0o777 == 0o600


def _shipped(tmp_path: Path, name: str) -> Path:
    # A copy of a shipped configuration beside the shipped policies and tools, with the
    # deployment's secret paths in tmp_path: loading it writes nothing into the repository.
    root = tmp_path / "repo"
    (root / name).mkdir(parents=True)
    (root / "policies").symlink_to(POLICIES)
    (root / "bundles").symlink_to(BUNDLE.parent)
    text = (EXAMPLE_CONFIG.parents[1] / name / "gateway.toml").read_text(encoding="utf-8")
    path = root / name / "gateway.toml"
    path.write_text(text.replace("/run/secrets/", f"{tmp_path}/secrets/"), encoding="utf-8")
    return path


def test_the_shipped_example_config_is_keyed_with_a_key_made_in_the_demo_folder(
    tmp_path: Path,
) -> None:
    config = load_config(_shipped(tmp_path, "examples"))

    assert config.audit.key_file == tmp_path / "repo" / ".demo" / "audit.key"
    assert config.audit.key is not None
    assert config.audit.key == (tmp_path / "repo" / ".demo" / "audit.key").read_bytes().strip()
    assert config.audit.unkeyed is False


def _deploy_secrets(tmp_path: Path, api_key: str = "a key nobody published") -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    (secrets / "gateway_audit_key").write_bytes(AUDIT_KEY)
    (secrets / "gateway_api_keys").write_text(
        f'[[api_keys]]\nsha256 = "{api_key_digest(api_key)}"\n'
        'context = { subject = "ops", roles = ["reader"] }\n',
        encoding="utf-8",
    )


def test_the_deploy_config_takes_its_audit_key_and_api_keys_from_secret_files(
    tmp_path: Path,
) -> None:
    _deploy_secrets(tmp_path)

    config = load_config(_shipped(tmp_path, "deploy"))

    assert config.audit.key == AUDIT_KEY
    assert [(k.sha256, dict(k.context)) for k in config.auth.api_keys] == [
        (api_key_digest("a key nobody published"), {"subject": "ops", "roles": ["reader"]})
    ]
    assert config.server.host == "0.0.0.0"  # noqa: S104 - what the file says


def test_the_deploy_config_refuses_to_start_without_its_secrets(tmp_path: Path) -> None:
    path = _shipped(tmp_path, "deploy")
    with pytest.raises(ConfigError, match=r"^audit\.key_file: cannot read"):
        load_config(path)
    _deploy_secrets(tmp_path)
    (tmp_path / "secrets" / "gateway_api_keys").unlink()
    with pytest.raises(ConfigError, match=r"^auth\.api_keys_file: cannot read"):
        load_config(path)


def test_the_deploy_config_holds_no_credential() -> None:
    text = (EXAMPLE_CONFIG.parents[1] / "deploy" / "gateway.toml").read_text(encoding="utf-8")
    assert re.search(r"^sha256\s*=", text, re.MULTILINE) is None
    assert "demo-key" not in text


# -- published credentials on a listener that is not loopback ----------------------------------

LOOPBACK = ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"]
NOT_LOOPBACK = ["0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "gateway.example", "", "::ffff:7f00:1"]  # noqa: S104


@pytest.mark.parametrize("host", LOOPBACK)
def test_published_keys_are_accepted_on_loopback_for_the_demo(tmp_path: Path, host: str) -> None:
    data = at(valid(tmp_path), "server.host", host)
    assert parse_config(data, base=tmp_path).server.host == host


@pytest.mark.parametrize("published", PUBLISHED_KEYS)
@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_a_published_key_is_refused_on_a_listener_that_is_not_loopback(
    tmp_path: Path, host: str, published: str
) -> None:
    mine = {"sha256": api_key_digest("a key nobody published"), "context": {"subject": "me"}}
    theirs = {"sha256": api_key_digest(published), "context": {"subject": "demo"}}
    data = at(at(valid(tmp_path), "server.host", host), "auth.api_keys", [mine, theirs])

    with pytest.raises(ConfigError) as caught:
        parse_config(data, base=tmp_path)

    message = str(caught.value)
    assert message.startswith("auth.api_keys[1]: this API key is published")
    assert published not in message
    assert api_key_digest(published) not in message


def test_a_published_key_in_the_api_keys_file_is_refused_naming_that_file(
    tmp_path: Path,
) -> None:
    _deploy_secrets(tmp_path, api_key="demo-key-alice")
    secrets = tmp_path / "secrets" / "gateway_api_keys"

    with pytest.raises(ConfigError) as caught:
        load_config(_shipped(tmp_path, "deploy"))

    assert str(caught.value).startswith(f"auth.api_keys_file ({secrets}) api_keys[0]: ")


def test_a_published_jwt_secret_is_refused_on_a_listener_that_is_not_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_TEST_PUBLISHED_SECRET", "demo-key-alice")
    change = jwt_table(algorithms=["HS256"], secret_env="GATEWAY_TEST_PUBLISHED_SECRET")  # noqa: S106
    data = at(change(valid(tmp_path)), "server.host", "0.0.0.0")  # noqa: S104
    data = at(data, "auth.api_keys", ...)

    with pytest.raises(ConfigError, match=r"^auth\.jwt\.secret_env: this secret is published"):
        parse_config(data, base=tmp_path)


def test_the_listener_check_applies_to_the_address_actually_served(tmp_path: Path) -> None:
    config = parse_config(valid(tmp_path), base=tmp_path)

    check_listener(config, "127.0.0.1")
    with pytest.raises(ConfigError, match=r"^auth\.api_keys\[0\]: .* listener 0\.0\.0\.0"):
        check_listener(config, "0.0.0.0")  # noqa: S104


ROOT = EXAMPLE_CONFIG.parents[1]
# Where this repository shows API keys: headers, demo names, sha256 entries of shipped files.
_HEADER_KEY = re.compile(r"X-API-Key['\"]?\s*:\s*['\"]?([A-Za-z0-9._~-]{3,})", re.IGNORECASE)
_NAMED_KEY = re.compile(r"\b(?:demo|reliability|test)-key-[a-z]+\b")
_DIGEST = re.compile(r'sha256\s*=\s*"([0-9a-f]{64})"')


def test_every_key_this_repository_publishes_is_on_the_published_list() -> None:
    texts = [ROOT / "README.md", ROOT / "docker-compose.yml", ROOT / "Dockerfile"]
    for folder in ("examples", "deploy", "tests", "reliability", "benchmarks", "policies", "docs"):
        texts += [
            path
            for path in (ROOT / folder).rglob("*")
            if path.is_file() and path.suffix in {".md", ".py", ".toml", ".yml", ".json", ".sh"}
        ]
    found: set[str] = set()
    digests: set[str] = set()
    for path in texts:
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found |= set(_NAMED_KEY.findall(text))
        if path.parent.name in ("examples", "deploy") or path.parent == ROOT:
            found |= {key for key in _HEADER_KEY.findall(text) if "{" not in key}
            if path.suffix == ".toml":
                digests |= set(_DIGEST.findall(text))
    published = {api_key_digest(key) for key in PUBLISHED_KEYS}

    assert {"demo-key-alice", "demo-key-bob", "demo-key-carol"} <= found
    assert sorted(key for key in found if key not in PUBLISHED_KEYS) == []
    assert sorted(digest for digest in digests if digest not in published) == []
