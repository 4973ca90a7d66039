"""icerouter's version, read once from the installed distribution's metadata.

pyproject.toml's ``version`` is the one place it is written: `icerouter --version`,
the job's start line and the ``icerouter_build_info`` metric all read it here.
"""

from __future__ import annotations

import platform
from functools import lru_cache
from importlib import metadata

DISTRIBUTION = "icerouter"


@lru_cache(maxsize=None)
def version() -> str:
    """The installed version ("unknown" when the packages are imported without an install)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_info() -> dict[str, str]:
    """What a running job reports about itself: its version and the engines it runs on."""
    info = {"version": version(), "python": platform.python_version()}
    for name in ("pyspark", "pyiceberg"):
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = "unknown"
    return info
