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
