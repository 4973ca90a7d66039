"""`icerouter run` in this process, with a thread that saves what Spark shows of the running query.

Run as ``python -m tests.router.driver.secrets_probe CONFIG OUT_DIR RECORDS METRICS_PORT``: once the
job's status file counts RECORDS records (rows and dead letters) and the query has run a later
batch, the thread writes ``explain(True)`` of the running query, its
``lastProgress`` / ``recentProgress``, a scrape of ``/metrics`` and Spark UI pages (REST API and the
SQL and Structured Streaming tabs) under OUT_DIR, then stops the job with SIGTERM, as an operator
would. The job logs at DEBUG (``-v``); the test reads its stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=20).read().decode("utf-8", "replace")


def _ui_pages(spark, run_id: str) -> dict[str, str]:
    base = spark.sparkContext.uiWebUrl
    if not base:
        return {}
    pages = {"sql_tab": "/SQL/", "streaming_tab": "/StreamingQuery/", "environment_tab": "/environment/",
             "jobs_tab": "/jobs/", "streaming_query_page": f"/StreamingQuery/statistics/?id={run_id}"}
    out = {name: _get(base + path) for name, path in pages.items()}
    app = json.loads(_get(base + "/api/v1/applications"))[0]["id"]
    for name in ("environment", "sql?details=true&planDescription=true", "jobs", "stages?details=true"):
        out[f"api_{name.split('?')[0]}"] = _get(f"{base}/api/v1/applications/{app}/{name}")
    return out


def _recorded(status_file: str) -> int:
    try:
        totals = json.loads(Path(status_file).read_text())["totals"]
    except (OSError, ValueError, KeyError):
        return 0
    return totals["rows"] + totals["dead_letters"]


def watch(out: Path, status_file: str, records: int, metrics_port: int) -> None:
    from pyspark.sql import SparkSession

    try:
        deadline, query, seen_at = time.monotonic() + 300, None, None
        while time.monotonic() < deadline:
            spark = SparkSession._instantiatedSession
            active = spark.streams.active if spark is not None else []
            if active:
                query = active[0]
                batches = len(query.recentProgress)
                if seen_at is None and _recorded(status_file) >= records:
                    seen_at = batches
                elif seen_at is not None and batches > seen_at:  # a batch after the data's: steady state
                    break
            time.sleep(0.5)
        else:
            raise TimeoutError(f"the job did not record {records} records in time")
        (out / "explain.txt").write_text(query._jsq.explainInternal(True))
        (out / "progress.json").write_text(json.dumps({"last": query.lastProgress, "recent": query.recentProgress,
                                                       "status": query.status}, default=str))
        (out / "metrics.txt").write_text(_get(f"http://127.0.0.1:{metrics_port}/metrics"))
        for name, text in _ui_pages(spark, str(query.runId)).items():
            (out / f"ui_{name}.txt").write_text(text)
        (out / "done").write_text("ok")
    except BaseException:  # noqa: BLE001 - reported to the test through the file, the job stops anyway
        (out / "error.txt").write_text(traceback.format_exc())
    finally:
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> int:
    import yaml

    config, out, records, port = argv[0], Path(argv[1]), int(argv[2]), int(argv[3])
    status_file = yaml.safe_load(Path(config).read_text())["job"]["status_file"]
    threading.Thread(target=watch, args=(out, status_file, records, port), daemon=True).start()
    from router.cli.commands import main as cli

    return cli(["-v", "run", "--config", config])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
