"""Where to start reading, decided by what the tables hold (driver side, once per start).

The Spark checkpoint is a cache of the tables' offsets (router/progress.py), and
a cache can be lost, replaced by an older copy or disagree with a table restored
from an older snapshot. At start the job reads, per topic-partition:

- the next offset of every table the partition's topic routes to (tables named
  by the topic alone, plus, when a route's name depends on data, every table
  of the catalog that holds offsets of this job);
- the dead-letter table's settled offset (everything below it is in a table or
  a dead letter), committed last in every batch;
- for a routed table this job never committed to (a new route), the configured
  ``kafka.starting_offsets`` (``earliest`` backfills it).

`resume` is the lowest of these: reading from there loses nothing, and the
tables drop what they already hold, so nothing is written twice. Without a
checkpoint the source starts there; with one, the first batch reads from the
resume offset when the checkpoint is behind it, and from the backfill offset of
a new table when that is behind the checkpoint.
"""

from __future__ import annotations

import logging
import time

from pyiceberg.exceptions import NoSuchTableError

from router.catalog import get_catalog, load_table
from router.config import RouterConfig
from router.progress import stored_progress
from router.routing import RoutingTable
from router.source.offsets import ResumePlan

log = logging.getLogger("icerouter.resume")


def _configured_start(starting, topic: str, partition: int, earliest: int, latest: int) -> int | None:
    if starting == "earliest":
        return earliest
    if starting == "latest":
        return None
    value = (starting.get(topic) or {}).get(partition) if isinstance(starting, dict) else None
    if value is None:
        return earliest
    return earliest if value == -2 else latest if value == -1 else int(value)


def _progress(config: RouterConfig, identifier: str, cache: dict) -> dict | None:
    if identifier not in cache:
        try:
            doc = stored_progress(load_table(config.catalog, identifier, refresh=True), config.job.name)
            cache[identifier] = doc if doc.get("batch_id", -1) >= 0 or doc.get("offsets") else None
        except NoSuchTableError:
            cache[identifier] = None
    return cache[identifier]


def _job_tables(config: RouterConfig) -> list[str]:
    """Every table of the catalog (allowed namespaces when set): for routes named by data."""
    catalog = get_catalog(config.catalog)
    namespaces = config.tables.allowed_namespaces or [".".join(ns) for ns in catalog.list_namespaces()]
    out = []
    for namespace in namespaces:
        try:
            out += [".".join(ident) for ident in catalog.list_tables(namespace)]
        except Exception:  # a namespace that does not exist yet holds no tables
            continue
    return out


def plan_resume(config: RouterConfig, partitions: list[tuple[str, int]], earliest: dict[str, int],
                latest: dict[str, int]) -> ResumePlan:
    """Pure over the catalog's current state: see the module docstring."""
    started = time.perf_counter()
    routing = RoutingTable(config.routes, config.tables, config.dlq)
    starting = config.kafka.starting_offsets
    cache: dict[str, dict | None] = {}
    dynamic = any(p != "topic" for r in routing.routes for p in r.placeholders)
    discovered = [t for t in _job_tables(config) if t != config.dlq.table] if dynamic else []
    dlq = _progress(config, config.dlq.table, cache) if config.dlq.table else None
    plan = ResumePlan()
    by_topic: dict[str, list[str]] = {}
    for topic, partition in sorted(partitions):
        key = f"{topic}/{partition}"
        lo, hi = earliest.get(key, 0), latest.get(key, 0)
        candidates: list[tuple[int, str]] = []
        named = [t for _, t in routing.static_tables_for_topic(topic) if t is not None]
        for table in dict.fromkeys(named + discovered):
            doc = _progress(config, table, cache)
            if doc is None or not doc.get("offsets"):
                if table in named:  # a new route: its table starts where the config says
                    begin = _configured_start(starting, topic, partition, lo, hi)
                    if begin is not None:
                        candidates.append((begin, f"new table {table}"))
                        plan.backfill[key] = min(plan.backfill.get(key, begin), begin)
                continue
            if key in doc["offsets"]:
                candidates.append((doc["offsets"][key], f"table {table}"))
        if config.dlq.table:
            settled = (dlq or {}).get("settled", {})
            if key in settled:
                candidates.append((settled[key], "dead letters settled"))
            elif candidates:  # tables hold rows of it but its dead letters may not be settled
                candidates.append((lo, "dead letters not settled"))
        if not candidates:
            by_topic.setdefault(topic, []).append(f"{partition}: {starting if isinstance(starting, str) else 'configured'}"
                                                  " (no table holds it)")
            continue
        offset, why = min(candidates)
        clamped = min(max(offset, lo), hi)
        plan.resume[key] = clamped
        gone = f", {lo - offset} records below it deleted by retention" if offset < lo else ""
        by_topic.setdefault(topic, []).append(f"{partition}@{clamped} ({why}{gone})")
    for topic, parts in by_topic.items():
        plan.notes.append(f"topic {topic}: partition {', '.join(parts)}")
    log.info("start positions from %d tables in %.1fs", len(cache), time.perf_counter() - started)
    return plan

