"""Validating OpenLineage events against the spec's JSON schemas.

spec/ holds the spec's schema files as the OpenLineage project publishes them (Apache-2.0,
OpenLineage/OpenLineage, spec/ at commit 8f02abfb7a252783b95df79f443edb13959bf52c): the event
(OpenLineage.json 2-0-2) and the facets icerouter sends. The event is validated against the
event schema, and every facet against the schema its `_schemaURL` names (icerouter's own
schema-change facet against docs/lineage/)."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

HERE = Path(__file__).parent / "spec"
ROOT = Path(__file__).resolve().parents[3]
FILES = [*HERE.glob("*.json"), *(HERE / "facets").glob("*.json"),
         ROOT / "docs" / "lineage" / "IcerouterSchemaChangeDatasetFacet.json"]


def _registry() -> Registry:
    resources = []
    for path in FILES:
        doc = json.loads(path.read_text())
        resources.append((doc["$id"], Resource.from_contents(doc)))
    return Registry().with_resources(resources)


REGISTRY = _registry()
EVENT = json.loads((HERE / "OpenLineage.json").read_text())


def _facets(event: dict):
    yield from (event["run"].get("facets") or {}).values()
    yield from (event["job"].get("facets") or {}).values()
    for dataset in [*event.get("inputs", []), *event.get("outputs", [])]:
        for key in ("facets", "inputFacets", "outputFacets"):
            yield from (dataset.get(key) or {}).values()


def validate_event(event: dict) -> None:
    """Raises jsonschema.ValidationError (or KeyError for a facet whose schema is not vendored)."""
    Draft202012Validator(EVENT, registry=REGISTRY).validate(event)
    for facet in _facets(event):
        url = facet["_schemaURL"]
        base, _, pointer = url.partition("#")
        REGISTRY.get_or_retrieve(base)  # KeyError-like failure when the schema is not vendored
        Draft202012Validator({"$ref": url}, registry=REGISTRY).validate(facet)
