"""Secrets to Spark's Python processes in a file Spark ships, never in an option Spark displays.

A data source's options show in the query's plans (`explain`, the SQL tab, the event log at every
explain mode) and in the driver's DEBUG log. So the job's sources take options with no secret in
them plus the name of a sealed file: the driver writes the secret part (librdkafka's client
config, the tasks' context with the catalog, object store and registry credentials) to a private
file (mode 0600 in a 0700 directory) and ships it with `SparkContext.addFile`; the processes that
need it (the source's planner on the driver, the tasks on the executors) open it by name through
`SparkFiles`. Spark displays an added file's path, never its contents. Local mode and clusters
alike: executors fetch added files from the driver, over Spark's RPC (authenticated and encrypted
where the cluster sets `spark.authenticate` and `spark.network.crypto.enabled`); environment
variables would need `spark.executorEnv.*`, which the UI's environment page lists.
"""

from __future__ import annotations

import atexit
import functools
import os
import pickle
import secrets
import shutil
import tempfile
from typing import Any

_directory: str | None = None


def _private_directory() -> str:
    global _directory
    if _directory is None:
        _directory = tempfile.mkdtemp(prefix="icerouter-sealed-")  # mode 0700
        atexit.register(shutil.rmtree, _directory, True)
    return _directory


def seal(spark, payload: Any) -> str:
    """Driver side: ship `payload` (picklable) to every Spark process of the application; returns the
    name to open it by. The name is random, so it tells nothing about the contents."""
    name = f"icerouter-sealed-{secrets.token_hex(16)}.pickle"
    path = os.path.join(_private_directory(), name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
    spark.sparkContext.addFile(path)
    return name


@functools.lru_cache(maxsize=16)
def unseal(name: str) -> Any:
    """In any process of the application (driver, its Python workers, executors): the sealed payload."""
    from pyspark import SparkFiles

    path = SparkFiles.get(name)
    if not os.path.exists(path):
        # a streaming source's planner gets `<root>/streaming_job` as its SparkFiles root (pyspark 4's
        # PythonStreamingSourceRunner), while the context's added files are in `<root>` itself
        path = os.path.join(os.path.dirname(os.path.dirname(path)), name)
    with open(path, "rb") as fh:
        return pickle.load(fh)
