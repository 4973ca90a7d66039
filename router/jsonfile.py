"""Write a JSON file that readers see whole: the old content or the new, never half of it.

For the files other processes read while we rewrite them: the job's status
file, the driver's handoff to the source planner, the dev stack's state and
registry data. Writes a temporary file beside the target, then renames it over
the target (`os.replace`, atomic within one file system). No fsync: these
files must survive a killed process, not a power loss.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["write_json_atomic"]


def write_json_atomic(path: str, doc: Any, *, private: bool = False, **dump_options: Any) -> None:
    """`doc` as JSON at `path` (its directory made if missing); `private`: readable by the owner only,
    for files that hold credentials. `dump_options` go to `json.dump` (indent, sort_keys, default)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, **dump_options)
    os.replace(tmp, path)
