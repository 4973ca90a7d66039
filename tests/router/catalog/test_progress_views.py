"""Many tables read at once for the job's start (router/catalog/progress_views.py): on SQLite and
PostgreSQL (one catalog query, metadata files read as JSON) and on the REST catalog (tables loaded),
the views answer exactly as the tables pyiceberg loads: offsets, rolled-back partitions, key columns."""

from __future__ import annotations

import pytest

from router.catalog import create_table, load_table
from router.catalog.commit import commit_table
from router.catalog.progress_views import TableView, table_views
from router.config import CatalogConfig, parse_config
from router.driver.job import check_table_modes
from router.exceptions import ConfigError
from router.ledger import table_ledger
from router.progress import stored_progress
from router.table_writes import table_key, with_key
from tests.router.catalog.test_commit import JOB, SCHEMA, catalog_config, result_for  # noqa: F401 (fixture)


def test_views_answer_as_the_loaded_tables(catalog_config, unique_name):
    ns = unique_name("n")
    held, rolled, fresh, keyed = (f"{ns}.{name}" for name in ("held", "rolled", "fresh", "keyed"))
    for name in (held, rolled, fresh):
        create_table(catalog_config, name, SCHEMA)
    create_table(catalog_config, keyed, with_key(SCHEMA, ["id"]))
    for batch in range(3):
        assert commit_table(catalog_config, result_for(catalog_config, held, f"t/{batch % 2}", batch * 10, 10),
                            JOB, batch).status == "committed"
    assert commit_table(catalog_config, result_for(catalog_config, rolled, "t/1", 0, 4), JOB, 0).status == "committed"
    first = load_table(catalog_config, rolled, refresh=True).metadata.current_snapshot_id
    both = result_for(catalog_config, rolled, "t/0", 0, 5)
    both.merge(result_for(catalog_config, rolled, "t/1", 4, 3))
    assert commit_table(catalog_config, both, JOB, 1).status == "committed"
    catalog_config.load().load_table(rolled).manage_snapshots().rollback_to_snapshot(first).commit()

    views = table_views(catalog_config, [held, rolled, fresh, keyed, f"{ns}.missing", held])
    assert sorted(views) == sorted([held, rolled, fresh, keyed])  # a missing table is left out
    for name, view in views.items():
        table = load_table(catalog_config, name, refresh=True)
        assert view.metadata_location == table.metadata_location
        assert stored_progress(view, JOB) == stored_progress(table, JOB)
        assert table_ledger(view, JOB) == table_ledger(table, JOB)
        assert view.schema() == table.schema()
    assert stored_progress(views[held], JOB)["offsets"] == {"t/0": 30, "t/1": 20}
    assert table_ledger(views[rolled], JOB).rewind_from() == {"t/0": 0, "t/1": 4}
    assert stored_progress(views[fresh], JOB) == {"batch_id": -1, "offsets": {}}
    assert table_key(views[keyed].schema()) == ("id",)
    if catalog_config.properties.get("type") == "sql":  # read as JSON, not through pyiceberg's model
        assert all(isinstance(v, TableView) for v in views.values())
    assert table_views(catalog_config, []) == {}


def test_a_format_v1_table_reads_as_pyiceberg_reads_it(catalog_config, unique_name):
    ns = unique_name("n")
    name = f"{ns}.v1"
    catalog = catalog_config.load()
    catalog.create_namespace(ns)
    table = catalog.create_table(name, schema=SCHEMA, properties={"format-version": "1"})
    empty = table_views(catalog_config, [name])[name]
    assert empty.metadata.current_snapshot_id is None and empty.schema() == table.schema()
    with table.transaction() as tx:
        tx.set_properties({"icerouter.offsets.other": '{"batch_id": 0, "offsets": {"x/0": 3}}'})
    loaded = catalog.load_table(name)
    view = table_views(catalog_config, [name])[name]
    assert stored_progress(view, "other") == stored_progress(loaded, "other") == {"batch_id": 0, "offsets": {"x/0": 3}}


def test_start_refuses_a_route_that_would_switch_a_table_mode(catalog_config, unique_name):
    ns = unique_name("n")
    create_table(catalog_config, f"{ns}.plain", SCHEMA)
    create_table(catalog_config, f"{ns}.keyed", with_key(SCHEMA, ["id"]))

    def config(*routes):
        return parse_config({"kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["a"]},
                             "registry": {"url": "http://127.0.0.1:9"},
                             "catalog": {"name": catalog_config.name, "properties": dict(catalog_config.properties)},
                             "routes": list(routes)})

    fine = config({"table": f"{ns}.plain"}, {"table": f"{ns}.keyed", "mode": "upsert", "key": ["id"]},
                  {"table": f"{ns}.new", "mode": "upsert", "key": ["id"]}, {"table": ns + ".{topic}"})
    check_table_modes(fine)
    with pytest.raises(ConfigError, match="is an append table; switching it to upsert is refused"):
        check_table_modes(config({"table": f"{ns}.plain", "mode": "upsert", "key": ["id"]}))
    with pytest.raises(ConfigError, match="is an upsert table keyed by id; an append route cannot"):
        check_table_modes(config({"table": f"{ns}.keyed"}))
    with pytest.raises(ConfigError, match="is keyed by id, the route by body"):
        check_table_modes(config({"table": f"{ns}.keyed", "mode": "upsert", "key": ["body"]}))
