"""Sending OpenLineage events without ever holding up the job: a bounded queue and one thread.

`Sender.submit` takes a function that builds events (reading table schemas from the catalog
happens there, in the sender's thread) and returns at once; a full queue drops the work, counts it
and logs once per 100 drops. Building or sending errors are logged at WARNING and counted, never
raised. `JobLineage` is the streaming job's run (START when the query starts, RUNNING when a batch
writes a table or feeds it from a topic the events have not named yet, or evolves it; COMPLETE or
FAIL at the end); `command_lineage` wraps `maintain` and `dlq replay` in a run of their own.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping

from router.config import RouterConfig
from router.lineage.naming import table_dataset, table_sources
from router.routing import RoutingTable

log = logging.getLogger("icerouter.lineage")

MISSING_CLIENT = "lineage needs the openlineage-python client: pip install 'icerouter[lineage]'"


def require_client() -> None:
    """A configured `lineage` section on an install without the client: a configuration error (exit 2)."""
    try:
        import openlineage.client  # noqa: F401
    except ImportError:
        from router.exceptions import ConfigError

        raise ConfigError(MISSING_CLIENT) from None


def make_client(transport: Mapping[str, Any]):
    """The openlineage-python client on the configured transport (nothing read from its env or files)."""
    try:
        from openlineage.client import OpenLineageClient
    except ImportError as exc:  # a lean install with lineage configured
        raise RuntimeError(MISSING_CLIENT) from exc
    return OpenLineageClient(config={"transport": dict(transport)})


class Sender:
    """One daemon thread sends what `submit` queued, in order."""

    def __init__(self, config: RouterConfig, client: Any = None) -> None:
        self.transport = dict(config.lineage.transport)
        self.client = client
        self.queue: queue.Queue = queue.Queue(config.lineage.queue_size)
        self.sent = self.failed = self.dropped = 0
        self.thread = threading.Thread(target=self._loop, name="icerouter-lineage", daemon=True)
        self.thread.start()

    def submit(self, build: Callable[[], list]) -> bool:
        try:
            self.queue.put_nowait(build)
            return True
        except queue.Full:
            self.dropped += 1
            if self.dropped % 100 == 1:
                log.warning("lineage: the sender is behind, %d event(s) dropped so far", self.dropped)
            return False

    def _loop(self) -> None:
        while True:
            build = self.queue.get()
            if build is None:
                return
            try:
                events = build()
                if self.client is None:
                    self.client = make_client(self.transport)
                for event in events:
                    self.client.emit(event)
                    self.sent += 1
            except Exception as exc:  # never raised into the job: logged, counted
                self.failed += 1
                log.warning("lineage: event not sent: %s", (str(exc).splitlines() or [type(exc).__name__])[0][:300])

    def close(self, timeout: float = 10.0) -> None:
        """Send what is queued (for at most `timeout` seconds), then stop the thread."""
        try:
            self.queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self.thread.join(timeout)


def _outputs(config: RouterConfig, tables: Iterable[str], sources: Mapping[str, set[str]] | None = None,
             changes: Mapping[str, list] | None = None, batch_id: int | None = None) -> list:
    """Output datasets with each table's current schema (a table not created yet has none)."""
    from router.catalog import load_table
    from router.lineage.events import output_dataset

    out = []
    for table in sorted(set(tables)):
        try:
            schema = load_table(config.catalog, table, refresh=True).schema()
        except Exception:  # not created yet (a new route), or the catalog is away: named, no schema
            schema = None
        out.append(output_dataset(config, table, schema, (sources or {}).get(table, ()),
                                  (changes or {}).get(table), batch_id))
    return out


def _table_inputs(config: RouterConfig, tables: Iterable[str]) -> list:
    from openlineage.client.event_v2 import InputDataset

    return [InputDataset(namespace=ns, name=name) for ns, name in
            (table_dataset(config.catalog, t) for t in sorted(set(tables)))]


class JobLineage:
    """The streaming job's run: one run id from the query's start to its end."""

    def __init__(self, config: RouterConfig, sender: Sender | None = None) -> None:
        require_client()
        from openlineage.client.uuid import generate_new_uuid

        self.config = config
        self.sender = sender or Sender(config)
        self.run_id = str(generate_new_uuid())
        self.announced: dict[str, set[str]] = {}  # table -> topics the events have named as its sources
        self.routing = RoutingTable(config.routes, config.tables, config.dlq)  # compiled once, cached per topic

    def _event(self, state: str, **kwargs) -> Any:
        from router.lineage.events import run_event

        return run_event(state, self.run_id, self.config, self.config.job.name, streaming=True, **kwargs)

    def start(self) -> None:
        config = self.config
        topics = list(config.kafka.topics)
        sources = table_sources(config, topics)
        outputs = list(sources) + ([config.dlq.table] if config.dlq.table else [])
        self.announced = {t: set(sources.get(t, ())) for t in outputs}

        def build() -> list:
            from router.lineage.events import input_datasets
            return [self._event("START", inputs=input_datasets(config, topics),
                                outputs=_outputs(config, outputs, sources))]
        self.sender.submit(build)

    def batch(self, batch_id: int, tables: Iterable[str], topics: Iterable[str],
              changes: Mapping[str, list] | None = None) -> None:
        """After a batch (the dispatcher's thread): a RUNNING event only when it says something new.
        Never raises: lineage must not fail a batch."""
        try:
            self._batch(batch_id, tables, topics, changes)
        except Exception as exc:
            log.warning("lineage: batch %s not described: %s", batch_id, exc)

    def _batch(self, batch_id: int, tables: Iterable[str], topics: Iterable[str],
               changes: Mapping[str, list] | None) -> None:
        config, changes = self.config, dict(changes or {})
        tables, topics = set(tables), set(topics)
        sources = table_sources(config, topics, tables, self.routing)
        fresh = {t for t in tables if t not in self.announced or not sources.get(t, set()) <= self.announced[t]}
        if not fresh and not changes:
            return
        for table in fresh:
            self.announced.setdefault(table, set()).update(sources.get(table, ()))
        fed = {t: set(self.announced.get(t, ())) for t in tables | set(changes)}
        named = fresh | set(changes)

        def build() -> list:
            from router.lineage.events import input_datasets
            inputs = set().union(*(fed.get(t, set()) for t in named))
            return [self._event("RUNNING", inputs=input_datasets(config, inputs),
                                outputs=_outputs(config, named, fed, changes, batch_id))]
        self.sender.submit(build)

    def finish(self, error: str | None = None, timeout: float = 10.0) -> None:
        """COMPLETE (or FAIL with the error's first line), then the queue is sent and the thread stops."""
        config, announced = self.config, {t: set(s) for t, s in self.announced.items()}

        def build() -> list:
            from router.lineage.events import input_datasets
            topics = set(config.kafka.topics).union(*announced.values())
            return [self._event("FAIL" if error else "COMPLETE", inputs=input_datasets(config, topics),
                                outputs=_outputs(config, announced, announced), error=error)]
        self.sender.submit(build)
        self.sender.close(timeout)


class CommandRun:
    """A run of `maintain` or `dlq replay`; the command sets `inputs` / `outputs` (table names) as it learns them."""

    def __init__(self, inputs: Iterable[str] = (), outputs: Iterable[str] = ()) -> None:
        self.inputs, self.outputs = list(inputs), list(outputs)


@contextlib.contextmanager
def command_lineage(config: RouterConfig | None, command: str, inputs: Callable[[], Iterable[str]] = lambda: (),
                    outputs: Callable[[], Iterable[str]] = lambda: ()) -> Iterator[CommandRun]:
    """START before the command, COMPLETE or FAIL after it, as job `<job name>.<command>`. `inputs` /
    `outputs`: the tables, listed in the sender's thread; the command may add to `run.outputs`.
    `config` None (a dry run) or lineage off: no events."""
    run = CommandRun()
    if config is None or not config.lineage.enabled:
        yield run
        return
    require_client()
    from openlineage.client.uuid import generate_new_uuid

    from router.lineage.events import run_event

    sender, run_id, job = Sender(config), str(generate_new_uuid()), f"{config.job.name}.{command}"

    def event(state: str, error: str | None = None) -> Callable[[], list]:
        def build() -> list:
            run.inputs = run.inputs or list(inputs())
            run.outputs = run.outputs or list(outputs())
            return [run_event(state, run_id, config, job, streaming=False, inputs=_table_inputs(config, run.inputs),
                              outputs=_outputs(config, run.outputs), error=error)]
        return build

    sender.submit(event("START"))
    try:
        yield run
    except BaseException as exc:
        sender.submit(event("FAIL", (str(exc).splitlines() or [type(exc).__name__])[0][:500]))
        raise
    else:
        sender.submit(event("COMPLETE"))
    finally:
        sender.close()
