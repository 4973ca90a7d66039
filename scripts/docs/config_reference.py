"""The configuration reference, generated from the typed config model and the real loader.

Which keys exist is asked of the loader itself: a key it does not know is rejected with the
list of the keys it allows, so each section is probed with one unknown key. Types and defaults
come from the model (router/config/model.py and the registry and policy dataclasses): the
default is read from a minimal config loaded by the loader. What a key means, its allowed
values and an example live in config_keys.yaml beside this file; `missing_docs` and
`unknown_docs` (and tests/docs) keep the two in step.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import re
import typing
from pathlib import Path
from typing import Any

import yaml

from evolution.policy import EvolutionPolicy
from registry.config import RegistryConfig
from router.config import model
from router.config.load import parse_config
from router.exceptions import ConfigError
from router.table_writes import TableWrite

KEYS_FILE = Path(__file__).with_name("config_keys.yaml")
PROBE = "__undocumented_probe__"

#: the smallest config the loader accepts: every example is merged onto it and loaded
BASE: dict[str, Any] = {
    "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["orders"]},
    "registry": {"url": "http://127.0.0.1:8081"},
    "routes": [{"name": "orders", "topic": "orders", "table": "raw.{topic}"}],
}

#: section path -> (the model class that holds its keys, how to reach its object from a RouterConfig)
SECTIONS: dict[str, tuple[type, Any]] = {
    "": (model.RouterConfig, lambda c: c),
    "kafka": (model.KafkaConfig, lambda c: c.kafka),
    "registry": (RegistryConfig, lambda c: c.registry),
    "catalog": (model.CatalogConfig, lambda c: c.catalog),
    "job": (model.JobConfig, lambda c: c.job),
    "job.metrics": (model.MetricsConfig, lambda c: c.job.metrics),
    "tables": (model.TablesConfig, lambda c: c.tables),
    "routes[]": (model.RouteConfig, lambda c: c.routes[0]),
    "evolution": (None, None),
    "policy": (EvolutionPolicy, lambda c: c.evolution.default),
    "dlq": (model.DlqConfig, lambda c: c.dlq),
    "maintenance": (model.MaintenanceConfig, lambda c: c.maintenance),
    "lineage": (model.LineageConfig, lambda c: c.lineage),
}
#: keys of a route that the model keeps in its TableWrite
ROUTE_WRITE_KEYS = {f.name for f in dataclasses.fields(TableWrite)}


def _place(path: str, value: Any) -> dict:
    """A config fragment that sets `path` ("kafka.catch_up", "routes[].mode", "policy.new_column")."""
    if path.startswith("policy."):
        return {"evolution": {"default": {path.split(".", 1)[1]: value}}}
    if path.startswith("routes[]."):
        return {"routes": [{**BASE["routes"][0], path.split(".", 1)[1]: value}]}
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return out


def merge(base: Any, fragment: Any) -> Any:
    """`fragment` over `base`: mappings merge key by key, anything else (lists too) replaces."""
    if isinstance(base, dict) and isinstance(fragment, dict):
        out = dict(base)
        for key, value in fragment.items():
            out[key] = merge(base.get(key), value)
        return out
    return copy.deepcopy(fragment)


def section_keys(section: str) -> tuple[str, ...]:
    """The keys the loader accepts in `section`, from its own error for an unknown key."""
    fragment = _place(f"{section}.{PROBE}" if section else PROBE, 1) if section != "routes[]" else \
        {"routes": [{**BASE["routes"][0], PROBE: 1}]}
    try:
        parse_config(merge(BASE, fragment))
    except ConfigError as exc:
        message = str(exc)
    else:
        raise AssertionError(f"the loader accepted an unknown key in {section or 'the root'}")
    m = re.search(r"(?:allowed: |expected one of )(.*?)\)?$", message)
    if not m:
        raise AssertionError(f"cannot read the allowed keys of {section or 'the root'} from {message!r}")
    return tuple(k.strip() for k in m.group(1).split(","))


def model_keys() -> list[str]:
    """Every key path the loader accepts, section by section (sections themselves included)."""
    out = []
    for section in SECTIONS:
        for key in section_keys(section):
            path = f"{section}.{key}" if section else key
            if path in SECTIONS or f"{path}[]" in SECTIONS:
                continue  # a section of its own: documented by its heading
            out.append(path)
    return out


def load_docs() -> dict[str, Any]:
    return yaml.safe_load(KEYS_FILE.read_text())


def missing_docs(docs: dict | None = None) -> list[str]:
    """Keys of the model that config_keys.yaml does not document."""
    documented = set((docs or load_docs())["keys"])
    return [k for k in model_keys() if k not in documented]


def unknown_docs(docs: dict | None = None) -> list[str]:
    """Keys config_keys.yaml documents that the model lacks."""
    known = set(model_keys())
    return [k for k in (docs or load_docs())["keys"] if k not in known]


def example_config(path: str, entry: dict) -> dict:
    """The whole config an example stands for: the minimal config with the example merged in."""
    return merge(BASE, example_fragment(path, entry))


def example_fragment(path: str, entry: dict) -> dict:
    fragment = _place(path, entry["example"])
    for other, value in (entry.get("example_with") or {}).items():
        fragment = merge(fragment, _place(other, value))
    return fragment


def _type_text(annotation: str) -> str:
    text = annotation.replace("typing.", "")
    for pattern, words in ((r"tuple\[str, \.\.\.\]", "list of strings"), (r"Mapping\[str, \w+\]", "mapping"),
                           (r"\bstr\b", "string"), (r"\bint\b", "integer"), (r"\bfloat\b", "number"),
                           (r"\bbool\b", "boolean"), (r"\bMode\b", "mode"), (r"\bNone\b", "null")):
        text = re.sub(pattern, words, text)
    return text.replace(" | ", " or ")


def _field(section: str, key: str) -> dataclasses.Field | None:
    cls = SECTIONS[section][0]
    if section == "routes[]" and key in ROUTE_WRITE_KEYS:
        cls = TableWrite
    if cls is None:
        return None
    return next((f for f in dataclasses.fields(cls) if f.name == key), None)


def _in_base(section: str, key: str) -> bool:
    if section == "routes[]":
        return key in BASE["routes"][0]
    return key in BASE.get(section, {}) if section else key in BASE


def _default(section: str, key: str, loaded) -> Any:
    reach = SECTIONS[section][1]
    if reach is None:
        return dataclasses.MISSING
    if _in_base(section, key):  # the minimal config sets it: the model's own default
        field = _field(section, key)
        if field is None or field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            return dataclasses.MISSING
        return field.default if field.default is not dataclasses.MISSING else field.default_factory()
    obj = reach(loaded)
    if section == "routes[]" and key in ROUTE_WRITE_KEYS:
        obj = obj.write
    if not hasattr(obj, key):
        return dataclasses.MISSING
    value = getattr(obj, key)
    return value.value if hasattr(value, "value") and not isinstance(value, (int, float)) else value


def _value_text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, (dict, list)) and not value:
        return f"`{'{}' if isinstance(value, dict) else '[]'}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value >= 10_000:
        return f"`{value}` ({value:,})"
    return f"`{value}`"


def _allowed_text(spec: Any) -> str:
    if spec is None:
        return ""
    if isinstance(spec, str) and re.fullmatch(r"[\w.]+:\w+", spec):
        module, name = spec.split(":")
        values = getattr(importlib.import_module(module), name)
        return ", ".join(f"`{v}`" for v in (sorted(x.value if hasattr(x, "value") else x for x in values)
                                              if isinstance(values, (set, frozenset)) else values))
    return str(spec)


def _anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def render() -> str:
    docs = load_docs()
    loaded = parse_config(copy.deepcopy(BASE))
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python scripts/gen_docs.py` from the config model (router/config/) and",
        "     scripts/docs/config_keys.yaml: edit those, then regenerate. -->",
        "",
        docs["intro"].strip(),
        "",
        "Every example below is the [minimal configuration](#the-minimal-configuration) with the example",
        "merged in, and the test suite loads each one through the real loader.",
        "",
        "## The minimal configuration",
        "",
        "```yaml",
        yaml.safe_dump(BASE, sort_keys=False).strip(),
        "```",
        "",
    ]
    order = list(SECTIONS)
    keys_by_section: dict[str, list[str]] = {s: [] for s in order}
    for path in model_keys():
        section = next(s for s in sorted(order, key=len, reverse=True) if s and path.startswith(s + ".")) \
            if "." in path else ""
        keys_by_section[section].append(path)
    for section in order:
        meta = docs["sections"][section or "root"]
        lines += [f"## {meta['title']}", "", meta["doc"].strip(), ""]
        for path in keys_by_section[section]:
            lines += _render_key(section, path, docs["keys"].get(path, {}), loaded)
    return "\n".join(lines).rstrip() + "\n"


def _render_key(section: str, path: str, entry: dict, loaded) -> list[str]:
    key = path.rsplit(".", 1)[-1]
    field = _field(section, key)
    type_text = entry.get("type") or (_type_text(str(field.type)) if field is not None else "")
    if "default" in entry:
        default = entry["default"]
    else:
        value = _default(section, key, loaded)
        default = "" if value is dataclasses.MISSING else _value_text(value)
    rows = [("type", type_text), ("required", "yes" if entry.get("required") else ""),
            ("default", "" if entry.get("required") else default), ("allowed", _allowed_text(entry.get("allowed"))),
            ("secret", "yes: masked wherever it is shown" if entry.get("secret") else "")]
    out = [f"### `{path}`", "", entry.get("doc", "").strip(), ""]
    out += ["| | |", "| --- | --- |"] + [f"| {name} | {text} |" for name, text in rows if text] + [""]
    if "example" in entry:
        out += ["```yaml", yaml.safe_dump(example_fragment(path, entry), sort_keys=False).strip(), "```", ""]
    return out


def annotations_resolve() -> None:
    """Fail early when a model class's annotations no longer name types (used by the tests)."""
    for cls, _ in SECTIONS.values():
        if cls is not None:
            typing.get_type_hints(cls)
