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
resume offset when the checkpoint is behind it, and from the backfill offset
when that is behind the checkpoint: a new table's start, or where a table
rolled back (or restored) since the job's last commit to it now stands
(router/ledger.py `Ledger.rewind_from`). A table that merely received nothing for a
while is not read again.
"""

from __future__ import annotations

import logging
import time

from router.catalog import get_catalog
from router.catalog.progress_views import table_views
from router.config import RouterConfig
from router.ledger import table_ledger
from router.progress import stored_progress
from router.routing import RoutingTable
from router.source.offsets import EARLIEST, LATEST, ResumePlan, tp_key
from router.source.rewind import split_rewinds

log = logging.getLogger("icerouter.resume")


def _configured_start(starting, topic: str, partition: int, earliest: int, latest: int) -> int | None:
    if starting == "earliest":
        return earliest
    if starting == "latest":
        return None
    value = (starting.get(topic) or {}).get(partition) if isinstance(starting, dict) else None
    if value is None:
        return earliest
    return earliest if value == EARLIEST else latest if value == LATEST else int(value)


def _progress(config: RouterConfig, tables: list[str]) -> dict[str, tuple[dict | None, dict[str, int], dict]]:
    """table -> (its progress document, None when the job never committed it; where it must be read
    again from: `Ledger.rewind_from`; `Ledger.positions`: what it holds, replays included),
    for all of `tables` at once: one catalog query and the metadata files read as plain JSON
    (router/catalog/progress_views.py). A table that does not exist reads as never committed."""
    out: dict[str, tuple[dict | None, dict[str, int], dict]] = dict.fromkeys(tables, (None, {}, {}))
    for identifier, view in table_views(config.catalog, tables).items():
        ledger = table_ledger(view, config.job.name)
        # a table only replays wrote is new to the job: its backfill starts past what they put there
        out[identifier] = (ledger.doc if ledger.job_committed else None, ledger.rewind_from(), ledger.positions())
    return out


def job_tables(config: RouterConfig) -> list[str]:
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
                latest: dict[str, int], checkpoint: dict[str, int] | None = None) -> ResumePlan:
    """Start offsets from the catalog's current state: see the module docstring. `checkpoint`: the
    offsets document of the checkpoint's last batch, whose open rewind cursors are backfills a stop
    interrupted (they go on from the checkpoint; only the start and last lines need them here)."""
    started = time.perf_counter()
    routing = RoutingTable(config.routes, config.tables, config.dlq)
    starting = config.kafka.starting_offsets
    restored: dict[str, list[tuple[int, int, str]]] = {}  # topic -> (partition, offset, table) read again
    dynamic = any(r.named_by_data for r in routing.routes)
    discovered = [t for t in job_tables(config) if t != config.dlq.table] if dynamic else []
    named_by_topic = {topic: [t for _, t in routing.static_tables_for_topic(topic) if t is not None]
                      for topic in sorted({topic for topic, _ in partitions})}
    wanted = [config.dlq.table] if config.dlq.table else []
    wanted += [t for named in named_by_topic.values() for t in named] + discovered
    cache = _progress(config, list(dict.fromkeys(wanted)))
    dlq = cache[config.dlq.table][0] if config.dlq.table else None
    plan = ResumePlan()
    positions, resumed = split_rewinds(checkpoint or {})
    held_topics: dict[str, list[tuple[int, int, str]]] = {}
    fresh: list[str] = []
    for topic, partition in sorted(partitions):
        key = tp_key(topic, partition)
        lo, hi = earliest.get(key, 0), latest.get(key, 0)
        held: list[tuple[int, int, str]] = []  # (offset, preference, why): tables before dead letters
        new: list[tuple[int, int, str]] = []
        named = named_by_topic[topic]
        for table in dict.fromkeys(named + discovered):
            doc, behind, held_to = cache[table]
            if key in behind:  # rolled back: read again from there, even past a checkpoint
                begin = min(max(behind[key], lo), hi)
                plan.backfill[key] = min(plan.backfill.get(key, begin), begin)
                plan.backfills.setdefault(table, {})[key] = (begin, hi)
                restored.setdefault(topic, []).append((partition, begin, table))
            if doc is None or not doc.get("offsets"):
                if table in named:  # a new route: its table starts where the config says
                    begin = _configured_start(starting, topic, partition, lo, hi)
                    if begin is not None:
                        begin = min(max(begin, held_to.get(key, begin)), hi)
                        new.append((begin, 0, f"new table {table}"))
                        plan.backfill[key] = min(plan.backfill.get(key, begin), begin)
                        plan.backfills.setdefault(table, {})[key] = (begin, hi)
                continue
            if key in doc["offsets"]:
                held.append((doc["offsets"][key], 0, f"table {table}"))
                # an interrupted backfill reads on from its cursor: it is for the tables at or below the
                # cursor, not for one past it that stands below the position only because its last
                # offsets are transaction markers or records routed elsewhere
                if key in resumed and doc["offsets"][key] < positions[key] and doc["offsets"][key] <= resumed[key] \
                        and key not in plan.backfills.get(table, {}):
                    plan.backfills.setdefault(table, {})[key] = (doc["offsets"][key], hi)
        if config.dlq.table:
            settled = (dlq or {}).get("settled", {})
            if key in settled:
                held.append((settled[key], 1, "dead letters settled"))
            elif held:  # tables hold rows of it, but its dead letters were never settled
                held.append((lo, 1, "dead letters not settled"))
        if not held:
            if new:
                plan.resume[key] = min(max(min(new)[0], lo), hi)
            fresh.append(topic)
            continue
        offset, _, why = min(held + new)
        clamped = min(max(offset, lo), hi)
        plan.resume[key] = clamped
        gone = f", {lo - offset} records below it deleted by retention" if offset < lo else ""
        held_topics.setdefault(topic, []).append((partition, clamped, why + gone))
    for topic, parts in held_topics.items():
        plan.notes.append(f"topic {topic}: " + ", ".join(f"partition {p}@{o} ({why})" for p, o, why in parts))
    for topic, parts in restored.items():
        plan.notes.append(f"topic {topic}: tables rolled back since the job's last commit to them get "
                          + ", ".join(f"partition {p} from {o} ({t})" for p, o, t in parts) + " again")
    fresh_topics = sorted(set(fresh) - set(held_topics))
    if fresh_topics:
        label = starting if isinstance(starting, str) else "the configured offsets"
        plan.notes.append(f"{len(fresh_topics)} topic(s) no table holds yet start at {label}: "
                          + ", ".join(fresh_topics[:5]) + (" ..." if len(fresh_topics) > 5 else ""))
    for table, parts in sorted(plan.backfills.items()):
        plan.notes.append(f"backfill of {table}: {_count(parts.values())} records to read ("
                          + ", ".join(f"{k} {a}..{b}" for k, (a, b) in sorted(parts.items())) + ")")
    log.info("start positions from %d tables in %.1fs", len(cache), time.perf_counter() - started)
    return plan


def _count(ranges) -> int:
    return sum(max(0, until - begin) for begin, until in ranges)


def backfill_summary(config: RouterConfig, backfills: dict[str, dict[str, tuple[int, int]]],
                     reached: dict[str, int] | None = None) -> list[str]:
    """One line per backfill of this start: how much of its range its table now holds, from the
    table's own offsets (the run's last lines; a stop halfway says how far it got). `reached`: the
    next offset per partition this run's finished batches read up to (router/driver/dispatcher.py):
    a range read to its end is complete, though the table's next offset stops below it when the last
    offsets are transaction markers, compacted away or records routed elsewhere."""
    if not backfills:
        return []
    views = table_views(config.catalog, sorted(backfills))
    reached = reached or {}
    out = []
    for table, parts in sorted(backfills.items()):
        offsets = stored_progress(views[table], config.job.name).get("offsets", {}) if table in views else {}
        read = _count((begin, until if reached.get(key, 0) >= until else min(offsets.get(key, begin), until))
                      for key, (begin, until) in parts.items())
        out.append(f"backfill of {table}: {read} of {_count(parts.values())} records read"
                   + ("" if read >= _count(parts.values()) else " (the next start goes on from there)"))
    return out

