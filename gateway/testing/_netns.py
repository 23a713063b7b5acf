"""Hosts on one machine: Linux network namespaces joined by veth links to one bridge.

:class:`Network` makes a bridge in the caller's namespace (which gets the subnet's first
address, so the test itself can reach every host) and, per :meth:`Network.host`, a
namespace with its own loopback and one veth link to the bridge. Processes run on a host
through ``ip netns exec``; a host's link can be taken down and up again, or limited with a
token bucket (``tc tbf``). Everything is named after this process (interface names stay
within Linux's 15 characters) and removed by :meth:`Network.close`, processes first.

It needs root and iproute2 (``ip``, ``tc``); :func:`require_netns` says why when either is
missing, so that a test fails with the reason instead of skipping.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

_TIMEOUT_S = 30


class NetnsError(RuntimeError):
    """A namespace, link or process of the network could not be made or changed."""


def require_netns() -> None:
    """Raise :class:`NetnsError` naming what is missing to make hosts here."""
    if os.geteuid() != 0:
        raise NetnsError("network namespaces need root")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise NetnsError(f"{tool} (Debian's iproute2) is not installed")


def _run(argv: Sequence[str], namespace: str | None = None) -> None:
    if namespace is not None:
        argv = ["ip", "netns", "exec", namespace, *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {done.stderr.strip()}")


def _ip(*args: str, namespace: str | None = None) -> None:
    _run(["ip", *args], namespace)


class Host:
    """One namespace on the network: its name, address and processes."""

    def __init__(self, network: Network, name: str, namespace: str, address: str, link: str):
        self.network = network
        self.name = name
        self.namespace = namespace
        self.address = address
        self.link = link
        self._processes: list[subprocess.Popen[Any]] = []

    def popen(self, argv: Sequence[str], **options: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` on this host (``ip netns exec``); stopped by :meth:`Network.close`."""
        process = subprocess.Popen(["ip", "netns", "exec", self.namespace, *argv], **options)
        self._processes.append(process)
        return process

    def run(self, argv: Sequence[str], **options: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` on this host to its end."""
        options.setdefault("timeout", _TIMEOUT_S)
        options.setdefault("check", False)
        return subprocess.run(["ip", "netns", "exec", self.namespace, *argv], **options)  # noqa: PLW1510 - check is in options

    def link_down(self) -> None:
        """Cut this host off the network (its loopback stays up)."""
        _ip("link", "set", self.link, "down")

    def link_up(self) -> None:
        """Put this host back on the network."""
        _ip("link", "set", self.link, "up")

    def limit(self, rate: str | None) -> None:
        """Limit what this host sends (``tc tbf``, e.g. ``"64kbit"``); ``None`` lifts it."""
        _ip("link", "set", self.link, "up")
        inner = f"v{self.link[1:]}"
        subprocess.run(
            ["ip", "netns", "exec", self.namespace, "tc", "qdisc", "del", "dev", inner, "root"],
            capture_output=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
        if rate is not None:
            _run(
                ["tc", "qdisc", "add", "dev", inner, "root", "tbf", "rate", rate,
                 "burst", "16kbit", "latency", "2s"],
                self.namespace,
            )  # fmt: skip

    def limit_loopback(self, rate: str | None) -> None:
        """Slow this host's own loopback (``tc tbf``); ``None`` lifts it.

        A sidecar's link is then slow and lossy: the bucket's queue delays what exceeds the
        rate and drops what overflows it.
        """
        subprocess.run(
            ["ip", "netns", "exec", self.namespace, "tc", "qdisc", "del", "dev", "lo", "root"],
            capture_output=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
        if rate is not None:
            _run(
                ["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate,
                 "burst", "1600", "limit", "3000"],
                self.namespace,
            )  # fmt: skip

    def stop_processes(self) -> None:
        """Terminate (then kill) every process started here."""
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
        for process in self._processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self._processes.clear()

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address})"


class Network:
    """A bridge and the hosts on it; a context manager that removes them all.

    Args:
        subnet: an IPv4 /24 for the network (the bridge takes ``.1``, hosts ``.2`` on); by
            default one of 10.64.0.0/10 chosen by this process's id, so that two processes'
            networks do not share addresses.
    """

    def __init__(self, subnet: str | None = None) -> None:
        require_netns()
        if subnet is None:
            pid = os.getpid()
            subnet = f"10.{64 + pid % 64}.{(pid // 64) % 256}.0/24"
        self._net = ipaddress.ip_network(subnet)
        self._tag = f"{os.getpid() % 100000:05d}"
        self.bridge = f"gb{self._tag}"
        self.hosts: dict[str, Host] = {}
        self._next = 2
        _ip("link", "add", self.bridge, "type", "bridge")
        try:
            _ip("addr", "add", f"{self._net[1]}/{self._net.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except NetnsError:
            self.close()
            raise
        self.address = str(self._net[1])

    def host(self, name: str) -> Host:
        """A new host called ``name`` with the next address of the subnet."""
        index = self._next
        self._next += 1
        namespace = f"gw{self._tag}-{name}"
        outer, inner = f"h{self._tag}{index:03d}", f"v{self._tag}{index:03d}"
        address = str(self._net[index])
        _ip("netns", "add", namespace)
        host = Host(self, name, namespace, address, outer)
        self.hosts[name] = host
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", namespace)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        _ip("addr", "add", f"{address}/{self._net.prefixlen}", "dev", inner, namespace=namespace)
        _ip("link", "set", inner, "up", namespace=namespace)
        _ip("link", "set", "lo", "up", namespace=namespace)
        return host

    def close(self) -> None:
        """Stop every host's processes, then remove the hosts, their links and the bridge."""
        for host in self.hosts.values():
            host.stop_processes()
        for host in self.hosts.values():
            subprocess.run(["ip", "link", "del", host.link], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, check=False)
        self.hosts.clear()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
