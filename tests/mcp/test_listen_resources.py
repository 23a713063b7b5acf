"""Resource subscriptions of 2026-07-28 clients on ``subscriptions/listen``, decided by the policy.

Each URI a listen stream names in ``resourceSubscriptions`` is decided like
``resources/subscribe`` (``mcp.resources.subscribe``, audited); the acknowledgement names
only the allowed ones, and ``notifications/resources/updated`` reaches only the streams
whose subscription was allowed. End to end: the service under uvicorn, the SDK client of
2026-07-28, the shipped policies, the test upstream of either revision as a stdio subprocess.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.shared.subscriptions import ResourceUpdated

from tests.mcp.conftest import ConfigWriter, audit_records
from tests.mcp.test_bridge import ACME, GLOBEX, WAIT_S, connect, served
from tests.mcp.upstream_server import read_record


@pytest.mark.parametrize("era", ["", "legacy"], ids=["upstream-2026", "upstream-2025"])
async def test_a_listen_stream_gets_updates_only_of_the_resources_the_policy_allowed(
    write_config: ConfigWriter, record: Path, audit_path: Path, era: str
) -> None:
    # A 2025-11-25 upstream is subscribed with resources/subscribe, a 2026-07-28 one on a
    # subscriptions/listen stream of the gateway's naming the URI.
    config = write_config(stdio_context=None, era=era)
    async with (
        served(config) as url,
        connect(url, mode="2026-07-28") as alice,
        connect(url, key="bob-key", mode="2026-07-28") as bob,
        connect(url) as reader,
        alice.listen(resource_subscriptions=[ACME, GLOBEX]) as allowed,
        bob.listen(resource_subscriptions=[ACME], tools_list_changed=True) as refused,
    ):
        assert allowed.honored.resource_subscriptions == [ACME]
        # Bob's roles do not permit the subscription: only the tool list is acknowledged.
        assert refused.honored.resource_subscriptions is None
        assert refused.honored.tools_list_changed is True
        # The upstream announces an update of a subscribed resource when it is read.
        await reader.read_resource(ACME)
        with anyio.fail_after(WAIT_S):
            event = await allowed.__anext__()

    assert event == ResourceUpdated(uri=ACME)
    decisions = [
        (r["arguments"]["uri"], r["result"], r["context"]["subject"])
        for r in audit_records(audit_path)
        if r["type"] == "decision" and r["tool"] == "mcp.resources.subscribe"
    ]
    assert decisions == [(ACME, "allow", "alice"), (GLOBEX, "deny", "alice"), (ACME, "deny", "bob")]
    if era == "legacy":
        # Only the allowed subscription reached the upstream.
        events = [(e["event"], e["uri"]) for e in read_record(record) if "uri" in e]
        assert events[:2] == [("subscribe", ACME), ("read", ACME)]
