"""One running job per `job.name` and catalog: a lease kept in the catalog itself.

Why: two jobs with one name would both claim the same per-table offsets. Commits
detect it late (router/catalog/commit.py); the lease refuses the second job at
start, before Spark starts, with a message that names the holder.

How: the lease is a property of a small table of its own (`<namespace>.icerouter_jobs`,
no rows), ``icerouter.lease.<job>`` = {"owner", "host", "pid", "expires", "renewed"}.
Taking or renewing it is an Iceberg commit. pyiceberg applies a property update to the
table's latest metadata (no requirement can assert a property's old value), so of two
writers the last one wins: a claim is confirmed by reading it back after SETTLE_SECONDS,
and a starter that finds another owner there is refused. Two jobs started within that
window are told apart at the first renewal, where the one that lost stops.
The holder renews it every third of ``ttl`` seconds; a job that crashed stops renewing,
and once its lease expired a successor takes it over (at once on the same host, where the
holder's process can be seen to be gone). A holder that finds its lease
taken (it stalled past the expiry) stops the job. Metadata files of the lease table
are deleted as they are replaced, so renewals do not pile them up.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType

from router.catalog.tables import create_table, get_catalog
from router.config import CatalogConfig
from router.exceptions import RouterError

log = logging.getLogger("icerouter.lease")

LEASE_TABLE = "icerouter_jobs"
LEASE_SCHEMA = Schema(NestedField(1, "job", StringType(), required=False))
LEASE_TABLE_PROPERTIES = {"write.metadata.delete-after-commit.enabled": "true",
                          "write.metadata.previous-versions-max": "5"}
ATTEMPTS = 8
SETTLE_SECONDS = 1.0  # a claim is read back after this long: the last writer of a race holds the lease


class JobAlreadyRunning(RouterError):
    """Another process holds the job's lease."""

    exit_code = 2


def lease_property(job: str) -> str:
    return f"icerouter.lease.{job}"


def lease_table(config) -> str:
    """Where a job's lease is kept (`config`: a RouterConfig): beside its dead-letter table, else in
    the default namespace."""
    namespace = config.dlq.table.rsplit(".", 1)[0] if config.dlq.table else config.tables.default_namespace
    return f"{namespace}.{LEASE_TABLE}"


def read_lease(catalog: CatalogConfig, table: str, job: str) -> dict | None:
    """The lease document of `job` as the catalog has it now (None: no lease table, or not held);
    read only, for `icerouter status`."""
    try:
        raw = get_catalog(catalog).load_table(table).properties.get(lease_property(job))
    except NoSuchTableError:
        return None
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


@dataclass
class Lease:
    """This process's claim on `job` in `catalog` (router/driver/job.py takes it before Spark starts)."""

    catalog: CatalogConfig
    table: str
    job: str
    ttl: float = 60.0
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    clock: Callable[[], float] = time.time
    settle: float = SETTLE_SECONDS
    held: bool = False
    lost: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _load(self):
        """A handle of its own, read fresh: the process's cached handles (router/catalog/tables.py) are
        refreshed and committed in place by other threads, which would turn two claims into one base."""
        catalog = get_catalog(self.catalog)
        try:
            return catalog.load_table(self.table)
        except NoSuchTableError:
            try:
                create_table(self.catalog, self.table, LEASE_SCHEMA, (), LEASE_TABLE_PROPERTIES)
            except Exception:  # another starter created it first
                pass
            return catalog.load_table(self.table)

    def _dead_here(self, current: dict) -> bool:
        """The holder ran on this host and its process is gone: a crash whose lease need not be waited out."""
        if current.get("host") != socket.gethostname() or not isinstance(current.get("pid"), int):
            return False
        try:
            os.kill(current["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False

    def _current(self, table) -> dict | None:
        raw = table.properties.get(lease_property(self.job))
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def _write(self, table, now: float) -> None:
        doc = {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(),
               "renewed": round(now, 3), "expires": round(now + self.ttl, 3)}
        with table.transaction() as tx:
            tx.set_properties({lease_property(self.job): json.dumps(doc, sort_keys=True)})

    def _refuse(self, current: dict, now: float) -> JobAlreadyRunning:
        return JobAlreadyRunning(
            f"job {self.job!r} is already running (pid {current.get('pid')} on {current.get('host')}, "
            f"lease renewed {now - current.get('renewed', now):.0f} s ago, expires in "
            f"{current.get('expires', now) - now:.0f} s); stop it first, or start again once its lease expired "
            "if it crashed", job=self.job)

    def acquire(self) -> None:
        """Take the lease, or raise JobAlreadyRunning naming the holder."""
        for _ in range(ATTEMPTS):
            table = self._load()
            now = self.clock()
            current = self._current(table)
            if current and current.get("owner") != self.owner and current.get("expires", 0) > now \
                    and not self._dead_here(current):
                raise self._refuse(current, now)
            try:
                self._write(table, now)
            except CommitFailedException:
                continue  # someone else committed the lease table meanwhile: look again
            time.sleep(self.settle)
            confirmed = self._current(self._load())
            if confirmed is not None and confirmed.get("owner") != self.owner:  # a racer wrote after us
                raise self._refuse(confirmed, self.clock())
            self.held = True
            log.info("lease on job %s taken (%s, expires in %.0f s)", self.job, self.table, self.ttl)
            return
        raise JobAlreadyRunning(f"job {self.job!r}: the lease in {self.table} kept changing; another job with "
                                "this name is starting", job=self.job)

    def renew(self) -> bool:
        """Extend the lease; False (and `lost` set) when another owner took it."""
        for _ in range(ATTEMPTS):
            table = self._load()
            current = self._current(table)
            if current is not None and current.get("owner") != self.owner:
                self.held = False
                self.lost.set()
                log.error("lease on job %s was taken by pid %s on %s: this job stops", self.job,
                          current.get("pid"), current.get("host"))
                return False
            try:
                self._write(table, self.clock())
                return True
            except CommitFailedException:
                continue
        return True  # contention only: the lease is still ours until it expires; the next renewal tries again

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if not self.held:
            return
        for _ in range(ATTEMPTS):
            try:
                table = self._load()
                current = self._current(table)
                if current is None or current.get("owner") != self.owner:
                    break
                with table.transaction() as tx:
                    tx.remove_properties(lease_property(self.job))
                break
            except CommitFailedException:
                continue
            except Exception as exc:  # the catalog is gone: the lease expires by itself
                log.warning("could not release the lease on job %s: %s", self.job, exc)
                break
        self.held = False

    def keep(self, on_lost: Callable[[], None] | None = None) -> None:
        """Renew in a daemon thread every ttl/3 seconds; `on_lost` runs once if the lease is taken."""
        def loop() -> None:
            while not self._stop.wait(self.ttl / 3):
                try:
                    if not self.renew():
                        if on_lost is not None:
                            on_lost()
                        return
                except Exception as exc:  # catalog unreachable: retry at the next tick, the lease still runs
                    log.warning("lease renewal of job %s failed: %s", self.job, str(exc).splitlines()[0][:200])

        self._thread = threading.Thread(target=loop, name="icerouter-lease", daemon=True)
        self._thread.start()
