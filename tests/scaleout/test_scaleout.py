"""Replicas on separate network hosts follow one signed policy rollout (scaleout/).

A reduced run of ``python -m scaleout``: a bundle server, one replica on the embedded
engine and one with an OPA sidecar, each on its own network namespace. A revoking revision
reaches both (their caches included), and a bundle signed with another key, or the bundle
server's host cut off, changes nothing: every replica keeps enforcing the last good one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scaleout.run import (
    converge,
    hold,
    scenario_collected_trails,
    scenario_outage,
    scenario_redis,
    scenario_wrong_key,
)
from scaleout.topology import Topology, build

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def topology() -> Iterator[Topology]:
    made = build(("embedded", "opa"))
    try:
        yield made
    finally:
        made.close()


def test_every_replica_allows_under_the_first_revision(topology: Topology) -> None:
    assert hold(topology, granted=True, seconds=1)["wrong"] == 0


def test_a_revoking_revision_reaches_every_replica_and_its_cache(topology: Topology) -> None:
    revoking = topology.make_bundles("revoke", grant=False)
    for replica in topology.replicas:
        assert topology.call(replica, "warm") == 200  # now in each replica's cache
    times = converge(topology, granted=False, since=topology.publish(revoking))

    assert set(times) == {replica.host.name for replica in topology.replicas}


def test_a_bundle_signed_with_another_key_changes_nothing_anywhere(topology: Topology) -> None:
    result = scenario_wrong_key(topology, granted=False)

    assert result["calls"] > 0
    assert result["wrong"] == 0


def test_a_bundle_server_cut_off_changes_nothing_until_it_returns(topology: Topology) -> None:
    result = scenario_outage(topology, granted=False, how="link down")

    assert (result["calls"] > 0, result["wrong"]) == (True, 0)


def test_collected_chains_verify_against_the_anchors_until_one_is_deleted_or_rolled_back(
    topology: Topology,
) -> None:
    result = scenario_collected_trails(topology)

    assert result["intact"]["ok"], result
    assert result["deleted"]["failed"], result
    assert result["rolled_back"]["failed"], result
    assert "replica2: record " in result["rolled_back"]["err"]


@pytest.mark.parametrize("how", ["link down", "stalled (SIGSTOP)"])
def test_redis_cut_off_or_stalled_fails_closed_only_the_calls_that_need_state(
    topology: Topology, how: str
) -> None:
    regrant = topology.make_bundles(f"regrant-{how.split(maxsplit=1)[0]}", grant=True)
    converge(topology, granted=True, since=topology.publish(regrant))

    result = scenario_redis(topology, how)

    assert result["calls"] > 0
    assert (result["wrong"], result["unauthorized"]) == (0, 0), result
