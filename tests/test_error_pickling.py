"""Every error class of the product pickles with its attributes (errors cross Spark workers).

The classes are found by importing every module of router/, registry/ and
evolution/, so a new error class fails here until it has an example below.
"""

from __future__ import annotations

import importlib
import pickle

import pytest

from evolution.exceptions import (
    ApplyError, EvolutionError, EvolutionViolation, PolicyConfigError, UnsupportedSchemaError,
)
from evolution.picklable import PicklableError
from registry.exceptions import (
    DecodeError, RegistryConfigError, RegistryError, RegistryUnavailable, SchemaNotFound,
    UnsupportedSchemaType, WireFormatError,
)
from registry.protobuf_scan import Unsupported
from registry.variant_encode import VariantEncodeError
from router.changes.exceptions import ChangeStreamError, EnvelopeError, KeyColumnsError
from router.devstack.exceptions import (
    DevStackError, RegistryApiError, RegistryStoreError, ServiceMissingError, ServiceStartError,
    StackStateError,
)
from router.catalog.lease import JobAlreadyRunning
from router.operations.replay_commits import ReplayRefused
from router.deploy.distributions import PackError
from router.devstack.registry_compat import SchemaInvalid
from router.exceptions import (
    CompactionConflict, ConfigError, MaintenanceError, RouteError, RouterError, RowLevelError, SchemaFileError,
    ServiceUnavailable, TableNameError, TransientError, UnsupportedLocation,
)
from router.source.exceptions import (
    BrokerError, OffsetsError, ReadStalledError, SourceError, SourceOptionsError,
)
from tests.test_import_graph import product_modules

EXAMPLES = [
    PicklableError("plain", table="db.t", rows=[1, 2]),
    EvolutionError("cannot map", schema_name="a.B"),
    UnsupportedSchemaError("recursive", schema_name="a.Node", path=("x", "next")),
    PolicyConfigError("bad mode", key="new_column", value="grow", topic="t.*"),
    EvolutionViolation("narrowing", table="db.t", column="id", kind="type_change"),
    ApplyError("conflict", table="db.t", column="c"),
    RegistryError("plain", status=401),
    RegistryConfigError("url is required", key="url"),
    RegistryUnavailable("connection refused", url="http://r", schema_id=7, attempts=3, status=503),
    SchemaNotFound(subject="orders-value", status=404, reason="subject not found"),
    UnsupportedSchemaType("only AVRO and JSON", schema_id=3, schema_type="PROTOBUF"),
    WireFormatError("unknown magic byte 0x07", index=4, topic="t", partition=1, offset=99),
    DecodeError("EOF", schema_id=7, topic="t", partition=2, offset=1234, index=5),
    Unsupported("singular message field written twice"),
    VariantEncodeError("integer 10**40 has more than 38 digits: a variant cannot hold it"),
    RouterError("failed", table="db.t", route="r1", offset=None),
    ConfigError("unknown key", path="job.nme"),
    SchemaFileError("schema file x.avsc is not UTF-8 text", path="schemas/x.avsc"),
    JobAlreadyRunning("job 'orders' is already running (pid 4242 on host-a)", job="orders"),
    ReplayRefused("upsert table db.t has no Kafka metadata columns", table="db.t"),
    PackError("pyarrow is not installed here (icerouter requires pyarrow>=18)", distribution="pyarrow"),
    ServiceUnavailable("could not reach the schema registry", service="schema registry", url="http://r"),
    RouteError("no rule matched", topic="t", partition=0, offset=5),
    TableNameError("outside the allowed namespaces", table="x.t"),
    MaintenanceError("expiry failed", table="db.t"),
    CompactionConflict("files removed under us", table="db.t", snapshot_id=12),
    UnsupportedLocation("no filesystem", table="db.t", location="mem://x"),
    TransientError("[icerouter:transient] RegistryUnavailable: down"),
    RowLevelError("position deletes name a file that is not live", table="db.t", path="s3://w/d.parquet"),
    ChangeStreamError("table db.t is an append table", table="db.t"),
    EnvelopeError("not a Debezium envelope: no 'op' field", table="db.t"),
    KeyColumnsError("no key columns", table="db.t", route="r1"),
    SourceError("failed", topic="t", partition=1, offset=2),
    SourceOptionsError("bad option", topic="t"),
    OffsetsError("bad json"),
    BrokerError("no leader", topic="t", partition=3),
    ReadStalledError("no progress", topic="t", partition=3, offset=40),
    DevStackError("broker", "exited"),
    ServiceStartError("catalog", "port taken"),
    ServiceMissingError("postgres", "initdb not found"),
    StackStateError("stack", "state file unreadable"),
    RegistryApiError(404, 40401, "Subject 'x' not found."),
    RegistryStoreError(500, 50001, "Error in the backend data store: disk full"),
    SchemaInvalid("unsupported schemaType 'XML'"),
]


def error_classes_of_the_product() -> set[type]:
    found = set()
    for name in product_modules():
        if name.endswith("__main__"):  # runs the CLI when imported
            continue
        for value in vars(importlib.import_module(name)).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == name:
                found.add(value)
    return found


def test_every_error_class_has_an_example():
    missing = error_classes_of_the_product() - {type(e) for e in EXAMPLES}
    assert not missing, "no pickling example for " + ", ".join(sorted(c.__qualname__ for c in missing))


@pytest.mark.parametrize("err", EXAMPLES, ids=lambda e: type(e).__name__)
def test_round_trip_keeps_class_message_and_attributes(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert back.args == err.args and str(back) == str(err)
    assert vars(back) == vars(err)
    assert getattr(back, "transient", None) == getattr(err, "transient", None)


def test_the_attributes_are_there_after_the_round_trip():
    back = pickle.loads(pickle.dumps(RegistryApiError(422, 42201, "Invalid schema")))
    assert (back.http_status, back.error_code, back.detail, back.service) == (422, 42201, "Invalid schema", "registry")
    assert back.body() == {"error_code": 42201, "message": "Invalid schema"}
    back = pickle.loads(pickle.dumps(RouterError("failed", table="db.t", offset=None)))
    assert back.table == "db.t" and not hasattr(back, "offset") and back.context == {"table": "db.t"}
    assert str(back) == "failed (table=db.t)"


def test_an_attribute_set_after_construction_travels_too():
    err = WireFormatError("short value", topic="t")
    err.add_note("while decoding batch 7")
    err.partition = 4
    back = pickle.loads(pickle.dumps(err))
    assert back.partition == 4 and back.__notes__ == ["while decoding batch 7"]
