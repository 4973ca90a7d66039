"""Validating OpenLineage events: the run event and the facets icerouter sends, as the OpenLineage
specification (2-0-2, openlineage.io/spec) requires them, written here as JSON schemas of our own.

Each schema states what the specification makes required and the types of what we send: the
event (eventTime, producer, schemaURL, eventType, run.runId, job.namespace and job.name, datasets'
namespace and name), the fields every facet carries (`_producer`, `_schemaURL`) and each facet's
required fields. A facet is checked against the schema its `_schemaURL` names; icerouter's own
schema-change facet against its published schema (docs/lineage/). The formats (date-time, uuid,
uri) are checked here too.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[3]
OWN_FACET = json.loads((ROOT / "docs" / "lineage" / "IcerouterSchemaChangeDatasetFacet.json").read_text())

FORMATS = FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value) -> bool:
    return not isinstance(value, str) or dt.datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None


@FORMATS.checks("uuid", raises=ValueError)
def _uuid(value) -> bool:
    return not isinstance(value, str) or bool(uuid.UUID(value))


@FORMATS.checks("uri", raises=ValueError)
def _uri(value) -> bool:
    return not isinstance(value, str) or bool(urlsplit(value).scheme)


URI = {"type": "string", "format": "uri"}
NAMED = {"type": "object", "required": ["namespace", "name"],
         "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}, "facets": {"type": "object"}}}
FACET = {"type": "object", "required": ["_producer", "_schemaURL"],
         "properties": {"_producer": URI, "_schemaURL": URI, "_deleted": {"type": "boolean"}}}
TAGS = {"type": "array", "items": {"type": "object", "required": ["key", "value"],
                                   "properties": {"key": {"type": "string"}, "value": {"type": "string"},
                                                  "source": {"type": "string"}}}}
FIELD = {"type": "object", "required": ["name"],
         "properties": {"name": {"type": "string"}, "type": {"type": "string"},
                        "description": {"type": "string"},
                        "fields": {"type": "array", "items": {"$ref": "#/$defs/field"}}}}

RUN_EVENT = {
    "type": "object",
    "required": ["eventTime", "producer", "schemaURL", "run", "job"],
    "properties": {
        "eventTime": {"type": "string", "format": "date-time"},
        "producer": URI,
        "schemaURL": URI,
        "eventType": {"enum": ["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]},
        "run": {"type": "object", "required": ["runId"],
                "properties": {"runId": {"type": "string", "format": "uuid"}, "facets": {"type": "object"}}},
        "job": NAMED,
        "inputs": {"type": "array", "items": NAMED},
        "outputs": {"type": "array", "items": NAMED},
    },
}

#: facet name (as its `_schemaURL` names it) -> its own required fields and their types
FACETS = {
    "SchemaDatasetFacet": {"required": ["fields"], "$defs": {"field": FIELD},
                           "properties": {"fields": {"type": "array", "items": {"$ref": "#/$defs/field"}}}},
    "ColumnLineageDatasetFacet": {
        "required": ["fields"],
        "properties": {"fields": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["inputFields"],
            "properties": {"inputFields": {"type": "array", "items": {
                "type": "object", "required": ["namespace", "name", "field"],
                "properties": {"namespace": {"type": "string"}, "name": {"type": "string"},
                               "field": {"type": "string"}}}}}}}}},
    "CatalogDatasetFacet": {"required": ["framework", "type", "name"],
                            "properties": {k: {"type": "string"} for k in ("framework", "type", "name")}},
    "ErrorMessageRunFacet": {"required": ["message", "programmingLanguage"],
                             "properties": {"message": {"type": "string"},
                                            "programmingLanguage": {"type": "string"},
                                            "stackTrace": {"type": "string"}}},
    "JobTypeJobFacet": {"required": ["processingType", "integration"],
                        "properties": {"processingType": {"enum": ["BATCH", "STREAMING"]},
                                       "integration": {"type": "string"}, "jobType": {"type": "string"}}},
    "ProcessingEngineRunFacet": {"required": ["version"],
                                 "properties": {"version": {"type": "string"}, "name": {"type": "string"}}},
    "TagsJobFacet": {"required": ["tags"], "properties": {"tags": TAGS}},
    "TagsRunFacet": {"required": ["tags"], "properties": {"tags": TAGS}},
}

_OWN_REGISTRY = Registry().with_resources([
    (OWN_FACET["$id"], Resource.from_contents(OWN_FACET)),
    ("https://openlineage.io/spec/2-0-2/OpenLineage.json",
     Resource.from_contents({"$schema": "https://json-schema.org/draft/2020-12/schema",
                             "$defs": {"DatasetFacet": FACET}})),
])


def _facets(event: dict):
    yield from (event["run"].get("facets") or {}).values()
    yield from (event["job"].get("facets") or {}).values()
    for dataset in [*event.get("inputs", []), *event.get("outputs", [])]:
        for key in ("facets", "inputFacets", "outputFacets"):
            yield from (dataset.get(key) or {}).values()


def validate_event(event: dict) -> None:
    """Raises jsonschema.ValidationError (KeyError for a facet this module has no schema of)."""
    Draft202012Validator(RUN_EVENT, format_checker=FORMATS).validate(event)
    for facet in _facets(event):
        Draft202012Validator(FACET, format_checker=FORMATS).validate(facet)
        url = facet["_schemaURL"]
        if url.startswith(OWN_FACET["$id"]):  # the bare id names the document: its one facet definition
            ref = url if "#" in url else f"{url}#/$defs/{next(iter(OWN_FACET['$defs']))}"
            Draft202012Validator({"$ref": ref}, registry=_OWN_REGISTRY, format_checker=FORMATS).validate(facet)
            continue
        name = urlsplit(url).path.rsplit("/", 1)[-1].removesuffix(".json")
        Draft202012Validator({"type": "object", **FACETS[name]}, format_checker=FORMATS).validate(facet)
