"""OpenLineage run events from what the job knows: its routes, the topics read, the tables written.

Built with the openlineage-python client's classes, so the transports send them as they are.
Output datasets carry the table's schema (`schema`), its catalog (`catalog`), the column lineage
from the topics that feed it (`columnLineage`: a column of the same name in each feeding topic's
records, IDENTITY; the `_kafka_*` metadata columns from the record's position) and, in the event of
a batch that evolved the table, `icerouter_schemaChange` (the changes as `plan` words them; its
JSON schema is docs/lineage/IcerouterSchemaChangeDatasetFacet.json).
"""

from __future__ import annotations

import datetime as dt
from typing import Iterable, Mapping

import attr
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    DatasetFacet, catalog_dataset, column_lineage_dataset, error_message_run, job_type_job,
    processing_engine_run, schema_dataset,
)

from router.config import RouterConfig
from router.lineage.naming import catalog_type, kafka_namespace, table_dataset
from router.masking import mask_url
from router.version import version

PRODUCER = f"urn:icerouter:{version()}"
SCHEMA_CHANGE_SCHEMA_URL = "urn:icerouter:facet:IcerouterSchemaChangeDatasetFacet:1-0-0"
#: metadata columns every row carries (tables.metadata_columns): from the record's place in Kafka
KAFKA_COLUMNS = {"_kafka_topic": "topic", "_kafka_partition": "partition", "_kafka_offset": "offset",
                 "_kafka_timestamp": "timestamp"}


@attr.define
class SchemaChangeDatasetFacet(DatasetFacet):
    """How a batch evolved the table: the changes applied, in `plan`'s words."""

    changes: list[str] = attr.field(factory=list)
    batchId: int | None = attr.field(default=None)  # noqa: N815 (the spec's camelCase)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_CHANGE_SCHEMA_URL


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


def schema_facet(schema) -> schema_dataset.SchemaDatasetFacet:
    """A pyiceberg Schema as the spec's schema facet (nested structs as nested fields)."""
    def fields(struct) -> list:
        out = []
        for position, f in enumerate(struct.fields, 1):
            nested = fields(f.field_type) if getattr(f.field_type, "is_struct", False) else None
            out.append(schema_dataset.SchemaDatasetFacetFields(
                name=f.name, type=str(f.field_type), description=f.doc or None, fields=nested or None,
                ordinal_position=position))
        return out
    return schema_dataset.SchemaDatasetFacet(fields=fields(schema))


def column_lineage(config: RouterConfig, columns: Iterable[str], topics: Iterable[str]):
    namespace = kafka_namespace(config.kafka.bootstrap_servers)
    topics = sorted(topics)
    if not topics:
        return None
    out = {}
    for column in columns:
        field = KAFKA_COLUMNS.get(column, column)
        how = "record metadata" if column in KAFKA_COLUMNS else "record value"
        out[column] = column_lineage_dataset.Fields(
            inputFields=[column_lineage_dataset.InputField(
                namespace=namespace, name=topic, field=field,
                transformations=[column_lineage_dataset.Transformation(type="DIRECT", subtype="IDENTITY")])
                for topic in topics],
            transformationDescription=f"{how}, routed by icerouter", transformationType="IDENTITY")
    return column_lineage_dataset.ColumnLineageDatasetFacet(fields=out)


def catalog_facet(config: RouterConfig) -> catalog_dataset.CatalogDatasetFacet:
    warehouse = config.catalog.properties.get("warehouse")
    return catalog_dataset.CatalogDatasetFacet(
        framework="iceberg", type=catalog_type(config.catalog), name=config.catalog.name,
        warehouseUri=mask_url(str(warehouse)).split("?")[0] if warehouse else None)


def input_datasets(config: RouterConfig, topics: Iterable[str]) -> list[InputDataset]:
    namespace = kafka_namespace(config.kafka.bootstrap_servers)
    return [InputDataset(namespace=namespace, name=topic) for topic in sorted(set(topics))]


def output_dataset(config: RouterConfig, table: str, schema=None, topics: Iterable[str] = (),
                   changes: list[str] | None = None, batch_id: int | None = None) -> OutputDataset:
    namespace, name = table_dataset(config.catalog, table)
    facets: dict = {"catalog": catalog_facet(config)}
    if schema is not None:
        facets["schema"] = schema_facet(schema)
        lineage = column_lineage(config, [f.name for f in schema.fields], topics)
        if lineage is not None:
            facets["columnLineage"] = lineage
    if changes:
        facets["icerouter_schemaChange"] = SchemaChangeDatasetFacet(changes=list(changes), batchId=batch_id)
    return OutputDataset(namespace=namespace, name=name, facets=facets)


def run_event(state: str, run_id: str, config: RouterConfig, job: str, *, streaming: bool,
              inputs: list | None = None, outputs: list | None = None, error: str | None = None) -> RunEvent:
    """One event of run `run_id` of `job` (namespace lineage.namespace); `state` START, RUNNING,
    COMPLETE, FAIL or OTHER."""
    run_facets: Mapping = {"processing_engine": processing_engine_run.ProcessingEngineRunFacet(
        version=version(), name="icerouter")}
    if error:
        run_facets = {**run_facets, "errorMessage": error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="PYTHON")}
    job_facets = {"jobType": job_type_job.JobTypeJobFacet(
        processingType="STREAMING" if streaming else "BATCH", integration="ICEROUTER", jobType="JOB")}
    return RunEvent(eventType=RunState[state], eventTime=_now(), producer=PRODUCER,
                    run=Run(runId=run_id, facets=dict(run_facets)),
                    job=Job(namespace=config.lineage.namespace, name=job, facets=job_facets),
                    inputs=inputs or [], outputs=outputs or [])
