"""What the job's Spark checkpoint says about the run it belongs to, read without Spark.

The checkpoint is a cache of the tables' offsets (router/progress.py); two things only it knows:
the id Spark gives the next batch, and the rewind cursors of a backfill a stop interrupted
(router/source/rewind.py). The driver reads them at start (router/driver/job.py), `icerouter
status` to know which backfills are open (router/operations/lag.py). Local checkpoints only.
"""

from __future__ import annotations

import json
import os


def next_batch_id(checkpoint: str) -> int | None:
    """The id Spark gives the first batch of this run: the last planned batch again if it never
    committed, else the one after; None when the checkpoint is not on a local disk."""
    if "://" in checkpoint and not checkpoint.startswith("file:"):
        return None
    root = checkpoint.removeprefix("file://").removeprefix("file:")

    def latest(folder: str) -> int:
        try:
            return max((int(n) for n in os.listdir(os.path.join(root, folder)) if n.isdigit()), default=-1)
        except OSError:
            return -1

    planned, committed = latest("offsets"), latest("commits")
    return planned if planned > committed else committed + 1


def checkpoint_offsets(checkpoint: str) -> dict | None:
    """The source's end offsets of the checkpoint's last planned batch (its rewind cursors are
    backfills a stop interrupted); None when there is none or it is not on a local disk."""
    batch = next_batch_id(checkpoint)
    if not batch:
        return None
    path = os.path.join(checkpoint.removeprefix("file://").removeprefix("file:"), "offsets", str(batch))
    if not os.path.exists(path):
        path = os.path.join(os.path.dirname(path), str(batch - 1))
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.loads(f.read().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return doc if isinstance(doc, dict) else None
