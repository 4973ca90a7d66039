"""The `format` of a route: how its topic's values are read (registry/formats.py), checked at load.

Shorthand ``format: json`` or a mapping::

    format: {type: json, schema_file: schemas/clicks.json}   # declared by a JSON Schema file
    format: {type: json, subject: clicks-value, version: 3}  # declared by a registry subject
    format: {type: json, numbers: double}                    # inferred, every number a double
    format: {type: json, variant: true}                      # the whole value in one variant column `value`
    format: {type: json, variant: true, variant_column: doc} # ... named doc
    format: {type: json, variant: [payload, attrs]}          # those fields as variant columns, the rest inferred

A schema file is read here (relative to the config file), mapped once so a bad
one is a one-line configuration error, and its text travels to the executors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evolution.jsonschema import jsonschema_to_iceberg
from registry.formats import FORMAT_KINDS, JSON, JSON_NUMBERS, REGISTRY_FORMAT, ValueFormat
from router.config.reader import Section
from router.exceptions import ConfigError
from router.table_writes import TableWrite

__all__ = ["parse_format", "variant_route", "FORMAT_KEYS", "DEFAULT_VARIANT_COLUMN"]

FORMAT_KEYS = ("type", "schema_file", "subject", "version", "numbers", "variant", "variant_column")
#: the column a whole-value variant gets unless ``variant_column`` names another
DEFAULT_VARIANT_COLUMN = "value"


def parse_format(spec: Any, where: str, base: Path) -> ValueFormat:
    if spec is None:
        return REGISTRY_FORMAT
    if isinstance(spec, str):
        spec = {"type": spec}
    s = Section(spec, where, FORMAT_KEYS)
    kind = s.choice("type", "registry", FORMAT_KINDS)
    schema_file, subject = s.get("schema_file", None, str), s.get("subject", None, str)
    version = s.get("version", "latest", (int, str))
    numbers = s.choice("numbers", "long", JSON_NUMBERS)
    if kind != JSON:
        for key in ("schema_file", "subject", "numbers", "variant", "variant_column"):
            if key in s.data:
                raise ConfigError(f"{where}.{key}: only a json format has one (type is {kind!r})")
    if schema_file and subject:
        raise ConfigError(f"{where}: give schema_file or subject, not both")
    if version != "latest" and (not isinstance(version, int) or version < 1):
        raise ConfigError(f"{where}.version: expected 'latest' or a version number >= 1, got {version!r}")
    if "version" in s.data and not subject:
        raise ConfigError(f"{where}.version: only a subject has versions")
    if (schema_file or subject) and "numbers" in s.data:
        raise ConfigError(f"{where}.numbers: a declared schema types its numbers; numbers is for inferred json")
    text = None
    if schema_file:
        path = Path(schema_file) if Path(schema_file).is_absolute() else base / schema_file
        try:
            text = path.read_text()
            jsonschema_to_iceberg(json.loads(text))
        except OSError as exc:
            raise ConfigError(f"{where}.schema_file: cannot read {path}: {exc.strerror}") from None
        except Exception as exc:
            raise ConfigError(f"{where}.schema_file: {path} is not a usable JSON Schema: "
                              f"{str(exc).splitlines()[0]}") from None
    variant, variant_column = _variant(s, where, declared=bool(schema_file or subject))
    return ValueFormat(kind, text, str(schema_file) if schema_file else None, subject, version, numbers,
                       variant, variant_column)


def _variant(s: Section, where: str, declared: bool) -> tuple[tuple[str, ...], str | None]:
    """``variant: true`` (the whole value, in ``variant_column``) or ``variant: [field, ...]`` (those
    top-level fields); -> (fields, whole-value column)."""
    spec, column = s.get("variant", None, (bool, list)), s.get("variant_column", None, str)
    if spec is None or spec is False:
        if column is not None:
            raise ConfigError(f"{where}.variant_column: only with variant: true")
        return (), None
    if declared:
        raise ConfigError(f"{where}.variant: a declared schema gives every column; variant is for inferred json")
    if spec is True:
        if "numbers" in s.data:
            raise ConfigError(f"{where}.numbers: with variant: true nothing is inferred")
        if column is not None and not column.strip():
            raise ConfigError(f"{where}.variant_column: an empty name")
        return (), column or DEFAULT_VARIANT_COLUMN
    if column is not None:
        raise ConfigError(f"{where}.variant_column: only with variant: true (variant lists fields by name)")
    names = [str(n) for n in spec]
    if not names or any(not n or "." in n for n in names) or len(set(names)) != len(names):
        raise ConfigError(f"{where}.variant: expected true or a list of distinct top-level field names, "
                          f"got {spec!r}")
    return tuple(names), None


def variant_route(fmt: ValueFormat, write: TableWrite, fields: dict, where: str, version: int,
                  route_version: bool) -> None:
    """A route with variant columns (registry/json_variant.py) writes a format v3 table (variant is a v3
    type: an existing v2 table gets the upgrade `icerouter plan` shows, router.decisions.decide_format),
    appends (a key or a change image is not a variant), and filters on no variant field."""
    if not fmt.has_variant:
        return
    if version < 3:
        key = f"{where}.format_version" if route_version else "tables.format_version"
        raise ConfigError(f"{where}.format.variant: variant columns need Iceberg format v3 ({key} is {version}; "
                          "set format_version: 3, docs/v3.md)")
    if write.upsert:
        raise ConfigError(f"{where}.format.variant: variant columns are for append routes (mode upsert and cdc "
                          "key rows by typed columns)")
    for name in fields:
        if fmt.variant_column is not None or str(name).split(".")[0] in fmt.variant:
            raise ConfigError(f"{where}.fields.{name}: a variant column cannot be filtered on")
