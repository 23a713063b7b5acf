"""Test helpers shipped with the gateway: fakes for every extension point and a real OPA.

Use these instead of monkeypatching: ``StaticAuthorizer`` and ``RecordingAuthorizer`` for
the Authorizer protocol, ``RecordingTool`` for Tool, ``FakeClock`` for every ``clock=``
parameter, ``GatedFsync`` for a file sink's ``sync_file`` and ``TornWrite`` for its
``write_head``, ``WakeCountingLoop`` to count an event loop's wake-ups from other threads,
``GatedEngine`` for an engine that answers only when a test lets it,
``OpaServer`` to run a real ``opa`` binary on loopback, ``BundleServer`` to serve bundles
as OPA's bundle servers do, and ``RedisServer`` to run a real ``redis-server`` on loopback
(killed, paused, restarted). ``JsonWork`` counts the strict JSON parses and canonical
encodings a piece of code does. ``OtlpReceiver`` is a real OTLP/HTTP traces receiver on
loopback that keeps the spans exported to it (``ReceivedSpan``). For tests that start a
server process: ``free_port`` and ``wait_until_healthy``; for signing: ``pem_pair`` and
``write_rsa_key_pair``.
"""

from gateway.testing._bundle_server import BundleServer
from gateway.testing._engines import UNDEFINED, StaticEngine
from gateway.testing._fakes import FakeClock, RecordingAuthorizer, RecordingTool, StaticAuthorizer
from gateway.testing._fsync import GatedFsync, TornWrite, WakeCountingLoop
from gateway.testing._gated import GatedEngine
from gateway.testing._json_work import JsonWork
from gateway.testing._keys import pem_pair, write_rsa_key_pair
from gateway.testing._live_server import LiveServer
from gateway.testing._opa_server import OpaContainer, OpaServer, find_opa_binary
from gateway.testing._otlp import OtlpReceiver, ReceivedSpan
from gateway.testing._redis_server import RedisServer, find_redis_binary
from gateway.testing._serving import free_port, wait_until_healthy

__all__ = [
    "UNDEFINED",
    "BundleServer",
    "FakeClock",
    "GatedEngine",
    "GatedFsync",
    "JsonWork",
    "LiveServer",
    "OpaContainer",
    "OpaServer",
    "OtlpReceiver",
    "ReceivedSpan",
    "RecordingAuthorizer",
    "RecordingTool",
    "RedisServer",
    "StaticAuthorizer",
    "StaticEngine",
    "TornWrite",
    "WakeCountingLoop",
    "find_opa_binary",
    "find_redis_binary",
    "free_port",
    "pem_pair",
    "wait_until_healthy",
    "write_rsa_key_pair",
]
