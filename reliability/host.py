"""What machine a harness run ran on, for the generated reports (benchmarks and reliability)."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """What this run ran on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
