"""Per-table commit cadence, decided where a batch's offsets are planned.

A table commits when it reads: the fused tasks write and commit what they read,
and a table's offsets move only with its commit. So a table that waits is a
table whose partitions are not read yet. The source's planner holds a partition
at its position while every table it feeds is waiting, and reads it (to the
latest offset, as any other) once one of them is due: its oldest unread record
is about `seconds` old, or it has `records` unread. Held records stay in Kafka
and in the consumer lag, never in memory or in files: a crash or a lost
checkpoint re-reads them from the tables' offsets as it would any batch, and
nothing is left behind to clean.

Ages are bounded from above without reading a record: a partition's unread
records all arrived after the last plan that read it to its end (or found
nothing new), so that moment stands for its oldest one. A table is due one
trigger before its bound reaches `seconds`: it commits at most a trigger early,
never late. After a start the bound is unknown and whatever waits is read at once.
That read puts every waiting table in step: each would commit in the same batch,
once a cadence, from then on. So each table's first wait after it is shortened to
a share of `seconds` set by a hash of its name (`first_share`): the tables commit
spread over the cadence from then on, each still never late.

A partition feeds the tables of every route that matches its topic; one that
feeds a table committing every batch (or that no route takes) is read every
batch, and the tables it feeds all commit then. A table fed by several routes
takes the tightest of their settings. The planner imports nothing heavy: it
runs in the Python process Spark starts for the source's planning.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from router.table_names import normalise_identifier_part

TOPIC = "{topic}"


@dataclass(frozen=True)
class CadenceRoute:
    """What the planner knows of one route: the topics it takes (`topic`: a full-match regex, None: all),
    the table it writes (a template whose only placeholder is {topic}; a route whose tables are named
    by data waits as one unit, `route:<name>`) and its cadence (both None: every batch)."""

    topic: str | None
    table: str
    seconds: float | None = None
    records: int | None = None

    @property
    def every_batch(self) -> bool:
        return self.seconds is None and self.records is None


@dataclass
class Waiting:
    """What one table holds back: unread records and the bound on the oldest one's arrival (epoch s)."""

    records: int = 0
    since: float | None = None  # None: unknown (a start): due at once
    seconds: float | None = None
    records_limit: int | None = None
    share: float = 1.0  # of `seconds` this wait lasts: below 1 for a table's first wait after a start

    def due(self, now: float, trigger_seconds: float) -> bool:
        if self.records_limit is not None and self.records >= self.records_limit:
            return True
        if self.seconds is None:
            return False
        return self.since is None or now - self.since + trigger_seconds >= self.seconds * self.share

    def as_json(self, due: bool) -> dict:
        """For the waiting file the driver's metrics and `icerouter status` read (`due`: read now)."""
        return {"records": self.records, "since": self.since, "due": due}


@dataclass
class Cadence:
    """The planner's state: when each partition was last read to its end (see the module docstring)."""

    routes: tuple[CadenceRoute, ...]
    trigger_seconds: float
    read_at: dict[str, float] = field(default_factory=dict)  # "topic/partition" -> epoch seconds
    spread: set[str] = field(default_factory=set)  # tables past their first, shortened wait since the start
    _units: dict[str, tuple[tuple[str, CadenceRoute], ...] | None] = field(default_factory=dict)
    _compiled: tuple = ()

    def __post_init__(self) -> None:
        self._compiled = tuple((re.compile(r.topic) if r.topic else None, r) for r in self.routes)

    @classmethod
    def from_json(cls, doc: Mapping | None) -> "Cadence | None":
        """The planner's cadence from the source option; None when every route commits every batch."""
        if not doc or all(CadenceRoute(*r).every_batch for r in doc.get("routes", ())):
            return None
        return cls(tuple(CadenceRoute(*r) for r in doc["routes"]), float(doc.get("trigger_seconds", 0.0)))

    def units(self, topic: str) -> tuple[tuple[str, CadenceRoute], ...] | None:
        """(table, route) the topic's records wait for; None: the topic is read every batch."""
        if topic not in self._units:
            matched = [r for rx, r in self._compiled if rx is None or rx.fullmatch(topic)]
            if not matched or any(r.every_batch for r in matched):
                self._units[topic] = None
            else:
                self._units[topic] = tuple((r.table.replace(TOPIC, normalise_identifier_part(topic)), r)
                                           for r in matched)
        return self._units[topic]

    def waiting(self, positions: Mapping[str, int], latest: Mapping[str, int],
                rewinding: Iterable[str] = ()) -> dict[str, tuple[Waiting, list[str]]]:
        """table -> (what it holds back, its partitions with unread records); partitions read every
        batch or rewinding (a backfill reads on regardless) are not counted."""
        skip = set(rewinding)
        out: dict[str, tuple[Waiting, list[str]]] = {}
        for key, position in positions.items():
            unread = latest.get(key, position) - position
            if unread <= 0 or key in skip:
                continue
            units = self.units(key.rpartition("/")[0])
            if units is None:
                continue
            for table, route in units:
                entry = out.get(table)
                if entry is None:
                    entry = out[table] = (Waiting(share=1.0 if table in self.spread else first_share(table)), [])
                waiting, keys = entry
                waiting.records += unread
                waiting.seconds = _tightest(waiting.seconds, route.seconds)
                waiting.records_limit = _tightest(waiting.records_limit, route.records)
                since = self.read_at.get(key)  # None: not read since the start, age unknown
                if not keys:
                    waiting.since = since
                elif waiting.since is not None:
                    waiting.since = None if since is None else min(since, waiting.since)
                keys.append(key)
        return out

    def held(self, waiting: Mapping[str, tuple[Waiting, list[str]]], now: float) -> set[str]:
        """The partitions none of whose tables is due: their end stays at their position."""
        due: set[str] = set()
        for table, (w, keys) in waiting.items():
            if w.due(now, self.trigger_seconds):
                due.update(keys)
                if w.since is not None:  # read after a wait of its own: in its place in the cadence from now on
                    self.spread.add(table)
        return {key for _, keys in waiting.values() for key in keys} - due

    def planned(self, end: Mapping[str, int], latest: Mapping[str, int], now: float) -> None:
        """After a plan: a partition read to its latest offset (or with nothing new) has nothing older
        than `now` left unread."""
        for key, offset in end.items():
            if offset >= latest.get(key, offset):
                self.read_at[key] = now


def first_share(table: str) -> float:
    """The share of its cadence a table's first wait after a start lasts, in (0, 1], from its name:
    stable across restarts and spread evenly over the tables."""
    return (zlib.crc32(table.encode()) % 1000 + 1) / 1000


def read_waiting(path: str | None) -> dict[str, dict]:
    """table -> {"records", "since", "due"} as the planner last wrote them ({}: no file, or unreadable)."""
    if not path:
        return {}
    try:
        with open(path) as fh:
            tables = json.load(fh).get("tables", {})
        return tables if isinstance(tables, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def _tightest(a, b):
    return b if a is None else a if b is None else min(a, b)
