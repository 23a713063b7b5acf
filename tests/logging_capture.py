"""The process's logging configured by a test, and put back as it was afterwards."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator

from gateway.service._config_models import LogTable
from gateway.service._logs import QUIET_LIBRARIES, configure_logging


@contextlib.contextmanager
def restored_logging() -> Iterator[None]:
    """Whatever the body does to logging (``configure_logging``), undone when it ends."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    names = (*QUIET_LIBRARIES, "gateway.startup", "gateway.access")
    levels = {name: logging.getLogger(name).level for name in names}
    try:
        yield
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        for name, before in levels.items():
            logging.getLogger(name).setLevel(before)


@contextlib.contextmanager
def captured_logging() -> Iterator[io.StringIO]:
    """The process's logging as ``--log-level debug`` (access log on) sets it, into a buffer."""
    with restored_logging():
        stream = io.StringIO()
        configure_logging(LogTable(level="debug", access=True), stream=stream)
        yield stream
