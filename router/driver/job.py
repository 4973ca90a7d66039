"""Start the streaming query on the driver's session and run it (driver side, once per start)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import tempfile
import threading
import time
from concurrent.futures import Future
from typing import Callable, Sequence

from router.catalog import get_catalog
from router.catalog.progress_views import table_views
from router.catalog.dead_letter_table import ensure_dead_letter_table
from router.config import RouterConfig
from router.driver.dispatcher import Dispatcher
from router.driver.checkpoint_files import checkpoint_offsets, next_batch_id
from router.driver.fused_stream import fused_stream
from router.catalog.lease import JobAlreadyRunning, Lease, lease_table
from router.driver.resume import backfill_summary, plan_resume
from router.driver.session import build_spark, in_background, warm_python_workers
from router.driver.status import BatchStats
from router.exceptions import ConfigError
from router.executor.fused_reader import write_handoff
from router.routing import RoutingTable
from router.routing.routes import commit_cadence
from router.source import KafkaSourceOptions, jvm_kafka_available, kafka_stream
from router.source.cadence import Cadence
from router.source.metadata import BrokerMetadata
from router.source.offsets import ResumePlan
from router.source.options import source_options
from router.table_writes import mode_conflict

log = logging.getLogger("icerouter.job")


def check_driver_python(spark) -> None:
    """The Python data source plans each batch in Python workers that the driver's JVM starts with
    the executors' interpreter (spark.pyspark.python), a relative path resolved against the
    driver's working directory: say so in one line instead of failing the query on it."""
    python = spark.sparkContext.pythonExec
    if os.sep in python and not os.path.exists(python):  # a bare name is looked up on PATH
        raise ConfigError(f"spark.pyspark.python {python} does not exist in the driver's working directory "
                          f"{os.getcwd()}: the driver runs the Kafka source's planning in that Python too "
                          "(with an archive from `icerouter pack`: mkdir -p environment && tar -xzf "
                          "<archive> -C environment)")


def handoff_path(job: str, checkpoint: str = "", kind: str = "handoff") -> str:
    """Where the driver hands its quarantine set and the next batch id to the source's planner,
    a process on the same host.

    The set lives as long as the driver process (a restart clears it, and `run` removes the file
    at exit): beside the job's local checkpoint (`<checkpoint>/icerouter/`, a folder Spark does not
    read), else, for a checkpoint behind a URI, in the temp dir. `kind` "waiting": the file the
    planner writes back, what the tables with a commit cadence hold (router/source/cadence.py).
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", job)
    name = f"icerouter-{safe}-{os.getpid()}.{kind}.json"
    if checkpoint and ("://" not in checkpoint or checkpoint.startswith("file:")):
        folder = os.path.join(checkpoint.removeprefix("file://").removeprefix("file:"), "icerouter")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, name)
    return os.path.join(tempfile.gettempdir(), name)


def with_cadence(options: KafkaSourceOptions, config: RouterConfig, python_source: bool = True):
    """The source options with the routes' commit cadence (router/source/cadence.py) when a route
    waits; the file the planner says what waits in lives beside the hand-off file."""
    routes = commit_cadence(config)
    if Cadence.from_json({"routes": routes}) is None:  # every route commits every batch
        return options
    if not python_source:
        log.warning("commit_after is not applied: the JVM Kafka source reads every partition every batch "
                    "(every table commits every batch)")
        return options
    return dataclasses.replace(options, cadence={
        "routes": routes, "trigger_seconds": config.job.trigger_seconds,
        "waiting_file": handoff_path(config.job.name, config.job.checkpoint, "waiting")})


def prepare_catalog(config: RouterConfig) -> None:
    """Initialise the catalog (a new SQL catalog creates its own tables) and the dead-letter table
    once on the driver, so the first tasks never race to do it."""
    get_catalog(config.catalog)
    if config.dlq.table:
        ensure_dead_letter_table(config.catalog, config.dlq.table, config.tables.format_version)
    check_table_modes(config)


def check_table_modes(config: RouterConfig) -> None:
    """Refuse to start when a route would switch an existing table between append and upsert
    (or to other key columns); tables named from data are checked by the tasks, the same way.
    The tables' current schemas are read together (router/catalog/progress_views.py)."""
    routing = RoutingTable(config.routes, config.tables, config.dlq)
    named = [(route, routing.render(route, "")) for route in routing.routes if not route.placeholders]
    views = table_views(config.catalog, [name for _, name in named])
    for route, name in named:
        if name not in views:
            continue
        reason = mode_conflict(name, views[name].schema(), route.write)
        if reason:
            raise ConfigError(f"route {route.name}: {reason}", table=name)


def start_positions(config: RouterConfig, options):
    """Where each partition starts, from the tables' offsets (router/driver/resume.py); logged per topic."""
    metadata = BrokerMetadata(options)
    try:
        partitions = metadata.partitions()
        earliest, latest = metadata.offsets(partitions, "earliest"), metadata.offsets(partitions, "latest")
    finally:
        metadata.close()
    plan = plan_resume(config, partitions, earliest, latest, checkpoint_offsets(config.job.checkpoint))
    for note in plan.notes:
        log.info("start: %s", note)
    return plan


def prepare_start(config: RouterConfig, options: KafkaSourceOptions) -> ResumePlan:
    """The catalog prepared and the start positions (the source's resume plan): no Spark needed."""
    prepare_catalog(config)
    return start_positions(config, options)


def start_query(spark, config: RouterConfig, available_now: bool = False,
                make_dispatcher: Callable[..., Dispatcher] = Dispatcher,
                listeners: Sequence[Callable[[BatchStats], None]] = (), resume: Future | None = None):
    """Start the streaming query; returns (query, dispatcher).

    `make_dispatcher` is called with the config and the Dispatcher's keyword arguments
    (benchmarks pass a subclass that records timings). `resume`: `prepare_start` running already
    (`launch`); its answer is awaited after the checks of the Spark side, whose errors come first.
    """
    python_source = not jvm_kafka_available(spark)
    if python_source:
        check_driver_python(spark)
    options = with_cadence(source_options(config), config, python_source)
    fused = config.job.fused_read and python_source
    if fused:  # the fused source's tasks are Python data source reads: their workers can be warmed
        warm_python_workers(spark)
    plan = prepare_start(config, options) if resume is None else resume.result()
    resume = plan.to_json()
    handoff_file = handoff_path(config.job.name, config.job.checkpoint) if fused else None
    if handoff_file:
        write_handoff(handoff_file, [], next_batch_id(config.job.checkpoint))  # a restart clears the quarantine
    dispatcher = make_dispatcher(config, fused_options=options.to_json() if fused else None,
                                 handoff_file=handoff_file, spark=spark, listeners=listeners)
    dispatcher.backfills = plan.backfills  # the run's last lines say how far each got
    dispatcher.waiting_file = (options.cadence or {}).get("waiting_file")
    if getattr(dispatcher, "metrics", None) is not None:
        dispatcher.metrics.serve(config.job.metrics.port, config.job.metrics.host)
    if fused:
        stream = fused_stream(spark, options, dispatcher.context(-1), handoff_file, resume)
    else:
        stream = kafka_stream(spark, options, resume_json=resume)
    writer = (stream.writeStream.queryName(config.job.name)
              .option("checkpointLocation", config.job.checkpoint)
              .foreachBatch(dispatcher))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.job.trigger_seconds} seconds")
    query = writer.start()
    log.info("query %s started (checkpoint %s)", config.job.name, config.job.checkpoint)
    return query, dispatcher


def launch(config: RouterConfig, available_now: bool = False, spark: Future | None = None, **kwargs):
    """`build_spark` and `start_query`, the catalog prepared and the start positions read while the
    JVM starts (both only talk to the catalog and the broker; at 1,000 tables they are a second or
    more of a start that Spark's session alone takes several seconds of). `spark`: the session
    being built already (router/driver/session.start_spark). Returns (spark, query, dispatcher);
    `kwargs` go to `start_query`."""
    resume = in_background(prepare_start, config, source_options(config))
    session = build_spark(config) if spark is None else spark.result()
    return (session, *start_query(session, config, available_now, resume=resume, **kwargs))


#: How long a stop waits for the running micro-batch to end before stopping it anyway.
STOP_WAIT_SECONDS = 60.0


def stop_between_batches(query, timeout: float = STOP_WAIT_SECONDS, poll: float = 0.05,
                         settle: float = 0.25) -> bool:
    """Stop `query` while no micro-batch runs; True if it stopped between batches (False: the timeout passed).

    Spark's `stop()` cancels the running batch's tasks and interrupts its
    foreachBatch: nothing is lost (the tables' offsets decide what is read
    again) but the batch's work is thrown away and its temp files left behind.
    Between two triggers nothing is running, so waiting for that gap loses
    nothing; a job whose batches run back to back is stopped after `timeout`.
    A gap counts once it lasted `settle` seconds: a batch that overran its trigger
    is followed by the next at once, and a stop in that instant cancelled it.
    """
    deadline = time.monotonic() + timeout
    between = False
    idle_since = None
    while query.isActive and time.monotonic() < deadline:
        if query.status.get("isTriggerActive", False):
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= settle:
            between = True
            break
        time.sleep(poll)
    query.stop()
    return between


def job_lease(config: RouterConfig) -> Lease | None:
    """The job's lease (router/catalog/lease.py), kept beside the dead-letter table; None when off."""
    if not config.job.lease_seconds:
        return None
    return Lease(config.catalog, lease_table(config), config.job.name, config.job.lease_seconds)


def run(config: RouterConfig, available_now: bool = False, spark: Future | None = None) -> Dispatcher:
    """Run until stopped (or until caught up with --available-now). `spark`: the session being
    built already (`icerouter run` starts the JVM before it imports this module)."""
    lease = job_lease(config)
    if lease is not None:
        lease.acquire()  # a second job with this name is refused here, before a query starts
    dispatcher = None
    try:
        spark, query, dispatcher = launch(config, available_now, spark=spark)

        def stop(signum, _frame):  # SIGTERM (systemd, Kubernetes): finish cleanly, exit 0
            log.info("signal %s: stopping %s after the current batch", signum, config.job.name)
            threading.Thread(target=stop_between_batches, args=(query,), name="icerouter-stop", daemon=True).start()

        signal.signal(signal.SIGTERM, stop)
        if lease is not None and dispatcher.metrics is not None:
            dispatcher.metrics.watch_lease(lease)
        if lease is not None:  # another process took the lease (this one stalled past it): stop now
            lease.keep(on_lost=lambda: threading.Thread(target=stop_between_batches, args=(query,),
                                                        name="icerouter-lease-stop", daemon=True).start())
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            log.info("stopping %s", config.job.name)
            query.stop()
        for line in backfill_summary(config, dispatcher.backfills, dispatcher.reached):
            log.info("%s", line)
        if query.exception() is not None:
            raise RuntimeError(f"streaming query failed: {str(query.exception()).splitlines()[0]}")
        if lease is not None and lease.lost.is_set():
            raise JobAlreadyRunning(f"job {config.job.name!r} stopped: another process took its lease",
                                    job=config.job.name)
        return dispatcher
    except BaseException as exc:
        if getattr(dispatcher, "lineage", None) is not None:
            dispatcher.lineage.finish(error=(str(exc).splitlines() or [type(exc).__name__])[0][:500])
            dispatcher.lineage = None
        raise
    finally:
        if getattr(dispatcher, "lineage", None) is not None:
            dispatcher.lineage.finish()
        group = getattr(dispatcher, "group", None)
        if group is not None:  # the last batches' offsets reach the consumer group too
            group.close()
        handoff = getattr(dispatcher, "handoff_file", None)
        waiting = getattr(dispatcher, "waiting_file", None)
        for path in (handoff, waiting):  # the driver's own files: nothing reads them once the query stopped
            if path:
                with contextlib.suppress(OSError):
                    os.remove(path)
        if lease is not None:
            lease.release()
