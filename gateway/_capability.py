"""Former home of the capability names, which now live in :mod:`gateway._contract`.

Kept only until every importer reads them from ``gateway._contract``; it imports nothing
the contract imports, so it closes no import cycle.
"""

from gateway._contract import (
    MAX_WRAPPING_DEPTH,
    InputValidatingTool,
    InputValidator,
    WrappingTool,
    capability,
)

__all__ = [
    "MAX_WRAPPING_DEPTH",
    "InputValidatingTool",
    "InputValidator",
    "WrappingTool",
    "capability",
]
