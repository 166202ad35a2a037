"""What ran a benchmark: the figures mean little without it."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

__all__ = ["machine"]


def machine() -> dict[str, Any]:
    """Date, CPU count and model, Python version and platform of this machine."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "nproc": os.cpu_count(), "cpu": cpu,
            "python": platform.python_version(), "platform": platform.platform()}
