"""gateway.testing's Network: hosts on namespaces that reach each other until cut off."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from gateway.testing._netns import Host, Network

pytestmark = pytest.mark.integration


def _get(host_from: Host, url: str) -> str:
    done = host_from.run(
        ["curl", "-s", "-m", "2", "-o", "/dev/null", "-w", "%{http_code}", url],
        capture_output=True,
        text=True,
    )
    return str(done.stdout)


def test_hosts_reach_each_other_until_a_link_is_down_and_leave_nothing_behind() -> None:
    with Network() as network:
        server, client = network.host("server"), network.host("client")
        server.popen(
            [sys.executable, "-m", "http.server", "--bind", server.address, "8000"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://{server.address}:8000/"
        deadline = time.monotonic() + 30
        while _get(client, url) != "200":
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.1)
        server.link_down()
        cut = _get(client, url)
        server.link_up()
        deadline = time.monotonic() + 30
        while _get(client, url) != "200":
            assert time.monotonic() < deadline, "the link did not come back"
            time.sleep(0.1)
        namespaces = {host.namespace for host in network.hosts.values()}
        bridge = network.bridge

    assert cut == "000"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert not namespaces & {line.split()[0] for line in listed.stdout.splitlines() if line}
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert bridge not in links.stdout
