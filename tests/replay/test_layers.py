"""gateway.replay sits between the policy layer and the surfaces, on their public faces."""

from __future__ import annotations

from tests.test_architecture import _layer_modules, _layer_violations

REPLAY_RULES = (
    ("replay", "gateway.server", "surfaces build on replay, never the reverse"),
    ("replay", "gateway.mcp", "surfaces build on replay, never the reverse"),
    ("replay", "gateway.service", "the service assembles replay, never the reverse"),
    ("replay", "gateway.cli", "the CLI registers replay's command, never the reverse"),
    ("replay", "gateway.policy._", "the policy layer's public face only"),
    ("replay", "gateway.audit._", "the audit package's public face only"),
)


def test_replay_imports_only_what_its_rules_allow() -> None:
    assert _layer_modules("replay")
    assert _layer_violations(REPLAY_RULES) == {}
