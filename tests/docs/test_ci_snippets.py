"""The registry-check snippets of docs/ci.md (GitHub Actions, GitLab CI, pre-commit) run one command:
it is run here as each snippet runs it, in a checkout-like directory with `icerouter.yaml` and
`schemas/`, against the registry emulator and a SQLite catalog. A compatible change passes (exit 0),
a breaking one is blocked (exit 1) with a JUnit failure."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.docs.helpers import DOCS, code_blocks

V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, {"name": "qty", "type": "int"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "note", "type": ["null", "string"], "default": None}]}
BREAK = {**V1, "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}


def _commands(value) -> list[str]:
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip().startswith("icerouter ") and " --" in line]
    if isinstance(value, dict):
        return [c for v in value.values() for c in _commands(v)]
    if isinstance(value, list):
        return [c for v in value for c in _commands(v)]
    return []


def snippets() -> dict[str, list[str]]:
    """title -> the icerouter commands of each titled YAML block of docs/ci.md."""
    out = {}
    for info, body in code_blocks(DOCS / "ci.md", "yaml"):
        if "title=" in info:
            out[info.split("title=", 1)[1].strip('"')] = _commands(yaml.safe_load(body))
    return out


def test_every_snippet_runs_icerouter_check():
    found = snippets()
    assert set(found) == {".github/workflows/schemas.yml", ".gitlab-ci.yml", ".pre-commit-config.yaml"}
    for title, commands in found.items():
        assert len(commands) == 1 and commands[0].startswith("icerouter check "), (title, commands)


@pytest.fixture
def checkout(tmp_path, registry_url, unique_name):
    """A repository as the snippets expect it: icerouter.yaml and schemas/, the services from the environment."""
    topic = unique_name("orders")
    SchemaRegistryClient({"url": registry_url}).register_schema(f"{topic}-value", RegistrySchema(json.dumps(V1), "AVRO"))
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("ci", **props)
    catalog.create_namespace("raw")
    catalog.create_table(f"raw.{topic}", schema=pa.schema([pa.field("id", pa.int64()), pa.field("qty", pa.int32())]))
    repo = tmp_path / "repo"
    (repo / "schemas").mkdir(parents=True)
    (repo / "icerouter.yaml").write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "unused:9092", "topics": [topic]},
        "registry": {"url": "${SCHEMA_REGISTRY_URL}"},
        "catalog": {"name": "ci", "properties": props},
        "routes": [{"name": "raw", "table": "raw.{topic}"}],
    }))
    env = {**os.environ, "SCHEMA_REGISTRY_URL": registry_url,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return repo, topic, env


@pytest.mark.parametrize("title", sorted(snippets()))
def test_snippet_command_passes_a_compatible_change_and_blocks_a_breaking_one(title, checkout):
    repo, topic, env = checkout
    [command] = snippets()[title]
    argv = shlex.split(command.split(">", 1)[0])  # the shell's redirection is the CI's business
    schema = repo / "schemas" / f"{topic}.avsc"

    schema.write_text(json.dumps(V2))
    ok = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr

    schema.write_text(json.dumps(BREAK))
    blocked = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    if "junit" in argv:
        suite = ET.fromstring(blocked.stdout).find("testsuite")
        assert int(suite.get("failures")) >= 1
    else:
        assert "BLOCKED" in blocked.stdout
