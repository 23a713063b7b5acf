"""Test helpers shipped with the gateway: fakes for every extension point and a real OPA.

Use these instead of monkeypatching: ``StaticAuthorizer`` and ``RecordingAuthorizer`` for
the Authorizer protocol, ``RecordingTool`` for Tool, ``FakeClock`` for every ``clock=``
parameter, and ``OpaServer`` to run a real ``opa`` binary on loopback.
"""

from gateway.testing._fakes import FakeClock, RecordingAuthorizer, RecordingTool, StaticAuthorizer
from gateway.testing._opa_server import OpaContainer, OpaServer, find_opa_binary

__all__ = [
    "FakeClock",
    "OpaContainer",
    "OpaServer",
    "RecordingAuthorizer",
    "RecordingTool",
    "StaticAuthorizer",
    "find_opa_binary",
]
