"""Many tables' progress and key columns read at once, without building pyiceberg's table model.

At start the job reads every routed table's offsets (router/driver/resume.py) and
the key columns of the tables its static routes name (router/driver/job.py
`check_table_modes`). Loading a table through pyiceberg costs a catalog query and
a full parse of its metadata file into pydantic models (every snapshot, schema
and log entry): at 1,000 tables that was most of the job's start. Both only read
the table properties, the current snapshot and its ancestors' summaries, and the
current schema: here the catalog is asked once for every table's metadata
location (our SqlCatalog), and each metadata file (the same file pyiceberg would
read: it is what the catalog points at now) is read as plain JSON in a thread
pool (object stores answer in parallel).

`TableView.metadata` has the attributes router/progress.py reads (properties,
current_snapshot_id, snapshots with snapshot_id, parent_snapshot_id and
summary.additional_properties), so `stored_progress` and `router.ledger.table_ledger` give the
same answers on a view as on the loaded table (tests/router/catalog/test_progress_views.py).
Other catalogs (REST, Glue, ...) load each table in the same thread pool.

`settled_offsets` reads the dead-letter table's settled offsets (the job's read position) by commit
order, on a view or a loaded table alike.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

from pyiceberg.io import load_file_io
from pyiceberg.schema import Schema
from pyiceberg.serializers import Compressor

from router.catalog.tables import get_catalog, load_table
from router.progress import stored_progress

#: Threads reading metadata files at once (local files parse under the GIL; object stores wait on the network).
READ_THREADS = 8


@dataclass(frozen=True)
class SummaryView:
    additional_properties: dict


@dataclass(frozen=True)
class SnapshotView:
    snapshot_id: int
    parent_snapshot_id: int | None
    summary: SummaryView | None
    timestamp_ms: int | None = None  # when the snapshot was committed (`icerouter status`)


@dataclass(frozen=True)
class MetadataView:
    properties: dict
    current_snapshot_id: int | None
    snapshots: list = field(default_factory=list)
    current_schema: dict | None = None  # the current schema's JSON, parsed on demand

    def schema(self) -> Schema | None:
        return Schema.model_validate(self.current_schema) if self.current_schema is not None else None


@dataclass(frozen=True)
class TableView:
    identifier: str
    metadata_location: str
    metadata: MetadataView

    def schema(self) -> Schema | None:
        return self.metadata.schema()


def parse_view(identifier: str, location: str, raw: dict) -> TableView:
    """The parts of a metadata file's JSON the start reads (names as in the Iceberg spec)."""
    current = raw.get("current-snapshot-id")
    snapshots = []
    for s in raw.get("snapshots") or ():
        summary = s.get("summary")
        snapshots.append(SnapshotView(s["snapshot-id"], s.get("parent-snapshot-id"),
                                      None if summary is None else SummaryView(
                                          {k: v for k, v in summary.items() if k != "operation"}),
                                      s.get("timestamp-ms")))
    schema_id = raw.get("current-schema-id")
    if schema_id is None or "schemas" not in raw:  # format v1 may keep its one schema alone
        schema = raw.get("schema")
    else:
        schema = next((s for s in raw["schemas"] if s.get("schema-id") == schema_id), None)
    return TableView(identifier, location, MetadataView(
        properties=dict(raw.get("properties") or {}),
        current_snapshot_id=None if current in (None, -1) else current,  # -1: none (format v1)
        snapshots=snapshots, current_schema=schema))


def _read(io, identifier: str, location: str) -> TableView:
    with io.new_input(location).open() as stream:
        with Compressor.get_compressor(location).stream_decompressor(stream) as plain:
            return parse_view(identifier, location, json.loads(plain.read()))


def table_views(config, identifiers: Iterable[str], threads: int = READ_THREADS) -> dict:
    """identifier -> a TableView of the table as the catalog has it now (a table missing is left out).
    A catalog without `current_locations` loads each table (pyiceberg's Table has the same attributes)."""
    from pyiceberg.exceptions import NoSuchTableError

    wanted = list(dict.fromkeys(identifiers))
    if not wanted:
        return {}
    catalog = get_catalog(config)
    locate = getattr(catalog, "current_locations", None)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(wanted))), thread_name_prefix="icerouter-views") as pool:
        if locate is None:
            def load(identifier):
                try:
                    return load_table(config, identifier, refresh=True)
                except NoSuchTableError:
                    return None

            loaded = dict(zip(wanted, pool.map(load, wanted)))
            return {i: t for i, t in loaded.items() if t is not None}
        locations = locate(wanted)
        io = load_file_io(properties=catalog.properties, location=next(iter(locations.values()), None))
        found = [i for i in wanted if i in locations]
        return dict(zip(found, pool.map(lambda i: _read(io, i, locations[i]), found)))


def settled_offsets(table, job: str) -> dict[str, int] | None:
    """The dead-letter table's ``settled`` offsets of `job` (where every record below is in its tables
    or a dead letter), as the table's latest commit of them left it, read by commit order
    (router/progress.py `stored_progress`); None when there are none."""
    if table is None:
        return None
    settled = stored_progress(table, job).get("settled")
    return dict(settled) if isinstance(settled, dict) else None
