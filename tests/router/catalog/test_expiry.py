"""The one snapshot expiry rule: the job and `maintain --dry-run` agree, branch and tag heads stay."""

from __future__ import annotations

import time

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from router.catalog import expire_snapshots, snapshots_to_expire
from router.config import MaintenanceConfig
from router.maintenance import maintain_table


def test_dry_run_reports_what_expiry_removes_and_keeps_tagged_snapshots(tmp_path):
    catalog = SqlCatalog("expiry", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=Schema(NestedField(1, "id", LongType(), required=False)))
    for i in range(6):
        table.append(pa.table({"id": pa.array([i], pa.int64())}))
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    tagged = snapshots[1].snapshot_id
    table.manage_snapshots().create_tag(tagged, "audit").commit()
    time.sleep(1.1)

    expected = snapshots_to_expire(table.metadata, retain_last=2, max_age_seconds=1)
    assert tagged not in expected and len(expected) == 3
    config = MaintenanceConfig(retain_last_snapshots=2, max_snapshot_age_seconds=1)
    dry = maintain_table(table, config, dry_run=True, orphans=False)
    assert dry.expired_snapshots == len(expected) and len(table.metadata.snapshots) == 6

    assert expire_snapshots(table, retain_last=2, max_age_seconds=1) == len(expected)
    left = {s.snapshot_id for s in catalog.load_table("ns.t").metadata.snapshots}
    assert tagged in left and not left & set(expected)


def test_expiry_on_a_stale_handle_removes_what_is_still_there(tmp_path):
    """The job's commits expire by the same rule while the maintenance thread expires: the thread's
    list can name snapshots a commit already removed; it chooses again on fresh metadata."""
    from router.catalog import get_catalog
    from router.config import CatalogConfig

    config = CatalogConfig("expiry", {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db",
                                      "warehouse": f"file://{tmp_path}/w"})
    catalog = get_catalog(config)  # the job's catalog class (router/catalog/sql.py)
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=Schema(NestedField(1, "id", LongType(), required=False)))
    for i in range(6):
        table.append(pa.table({"id": pa.array([i], pa.int64())}))
    time.sleep(1.1)
    maintenance_handle = catalog.load_table("ns.t")  # loaded before the job's commit below
    stale_choice = snapshots_to_expire(maintenance_handle.metadata, retain_last=2, max_age_seconds=1)
    assert len(stale_choice) == 4

    job_handle = catalog.load_table("ns.t")
    job_handle.maintenance.expire_snapshots().by_ids(stale_choice[:2]).commit()  # the job got there first
    job_handle.append(pa.table({"id": pa.array([6], pa.int64())}))

    assert expire_snapshots(maintenance_handle, retain_last=2, max_age_seconds=1) == 3  # 2 left + 1 now old
    fresh = catalog.load_table("ns.t")
    assert len(fresh.metadata.snapshots) == 2
    assert sorted(r["id"] for r in fresh.scan().to_arrow().to_pylist()) == list(range(7))
