"""One start of the job in a process of its own, for the scale1000 mode (start_scale.py).

    python -m scripts.perf.live.start_child SPEC.json

Run with PYTHONPATH naming the product code to measure first (the checkout's, or an older
revision's unpacked by start_scale.py), so the job, its JVM and its Python workers all run
that code. Marks are wall-clock times (time.time()) from the parent's `t0`, taken just before
it started this process: interpreter and imports (with code that has router/driver/session.py,
the JVM starts before the job's modules are imported, as in `icerouter run`), Spark session, the catalog's preparation,
the start positions (resume planning), the query's start, the first batch running (its
foreachBatch called). The job then drains what waits with availableNow; the result (marks,
per-batch rows, peak memory of the driver, the JVM and the Python workers) goes to SPEC's
`out` file as JSON.
"""

from __future__ import annotations

import time

PYTHON_READY = time.time()

import cProfile  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402


def _timed(module, name: str, into: dict, profile: cProfile.Profile | None):
    """Replace module.name by a wrapper that adds its seconds to into[name] (a probe: same call)."""
    original = getattr(module, name)

    def wrapper(*a, **k):
        started = time.perf_counter()
        if profile is not None:
            profile.enable()
        try:
            return original(*a, **k)
        finally:
            if profile is not None:
                profile.disable()
            into[name] = round(into.get(name, 0.0) + time.perf_counter() - started, 3)

    setattr(module, name, wrapper)


def _top(profile: cProfile.Profile, limit: int = 25) -> list[str]:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(limit)
    return [line for line in out.getvalue().splitlines() if line.strip()][:limit + 12]


def jvm_classes(java_options: str) -> str:
    """How the driver's JVM got its classes (router/driver/jvm_classes.py): from an archive of an
    earlier start ("mapped"), from the jars while recording one ("recording"), or from the jars."""
    if "SharedArchiveFile" in java_options:
        return "mapped"
    return "recording" if "ArchiveClassesAtExit" in java_options else "jars"


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    import router
    from scripts.perf.config import job_config

    args = SimpleNamespace(**spec["args"])
    config = job_config(args, Path(spec["root"]), spec["bootstrap"], spec["registry_url"], spec["client"],
                        pattern=spec["pattern"])
    parts: dict = {}
    early = None
    try:  # as `icerouter run` does: the JVM starts before the rest of the job is imported
        from router.driver.session import start_spark
    except ImportError:  # code from before that split
        start_spark = None
    if start_spark is not None:
        began = time.perf_counter()
        early = start_spark(config)
        early.add_done_callback(lambda _: parts.__setitem__("build_spark", round(time.perf_counter() - began, 3)))
    import router.driver.job as job
    from scripts.perf.probe import MemorySampler, RecordingDispatcher, batch_rows

    marks = {"python_ready": PYTHON_READY, "imports": time.time()}
    memory = MemorySampler().start()
    profile = cProfile.Profile() if spec.get("profile") else None
    for name in ("build_spark", "jvm_kafka_available", "check_driver_python", "prepare_catalog", "start_positions",
                 "fused_stream"):
        _timed(job, name, parts, None)
    _timed(job, "start_query", parts, profile)

    def make_dispatcher(*a, **k):
        started = time.perf_counter()
        try:
            return RecordingDispatcher(*a, **k)
        finally:
            parts["dispatcher"] = round(time.perf_counter() - started, 3)

    if early is not None:  # the session begun before the job's imports
        spark, query, dispatcher = job.launch(config, available_now=True, make_dispatcher=make_dispatcher,
                                              spark=early)
    elif hasattr(job, "launch"):  # the Spark session built while the catalog is read
        spark, query, dispatcher = job.launch(config, available_now=True, make_dispatcher=make_dispatcher)
    else:
        spark = job.build_spark(config)
        query, dispatcher = job.start_query(spark, config, available_now=True, make_dispatcher=make_dispatcher)
    marks["query_started"] = time.time()
    query.awaitTermination()
    peak = memory.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()).splitlines()[0])
    cores = spark.sparkContext.defaultParallelism
    java_options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
    spark.stop()
    if dispatcher.batches:
        marks["first_batch_running"] = dispatcher.batches[0].started
    t0 = spec["t0"]
    result = {"code": str(Path(router.__file__).parent.parent), "marks_s": {k: round(v - t0, 3) for k, v in marks.items()},
              "parts_s": parts, "launch": hasattr(job, "launch"), "jvm_classes": jvm_classes(java_options),
              "memory_peak_mb": peak, "executor_cores": cores,
              "batches": batch_rows(dispatcher.batches, cores)}
    if profile is not None:
        result["profile_top"] = _top(profile)
    Path(spec["out"]).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
