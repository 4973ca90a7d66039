"""The generated documentation is up to date with what it is generated from, and the configuration
reference documents exactly the keys the loader accepts.

A key added to the config, a command or option added to the CLI, or a benchmark JSON changed
fails here until `python scripts/gen_docs.py` has been run (and, for a config key, its entry
written in scripts/docs/config_keys.yaml).
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from router.cli import build_parser
from scripts import bench_tables, gen_docs
from scripts.docs import cli_reference, config_reference
from tests.docs.helpers import ROOT


def test_generated_pages_are_up_to_date():
    stale = gen_docs.stale()
    assert not stale, f"out of date: {stale}; run python scripts/gen_docs.py"


def test_check_mode_of_the_script_agrees():
    done = subprocess.run([sys.executable, "scripts/gen_docs.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_every_config_key_is_documented_and_no_other():
    assert config_reference.missing_docs() == [], "document these keys in scripts/docs/config_keys.yaml"
    assert config_reference.unknown_docs() == [], "config_keys.yaml documents keys the loader does not accept"


def test_the_key_check_sees_a_missing_and_an_unknown_key():
    docs = config_reference.load_docs()
    fewer = copy.deepcopy(docs)
    del fewer["keys"]["maintenance.compact_after_files"]
    assert "maintenance.compact_after_files" in config_reference.missing_docs(fewer)
    assert "maintenance.compact_after_files" not in config_reference.missing_docs(docs)
    more = copy.deepcopy(docs)
    more["keys"]["job.no_such_key"] = {"doc": "x", "example": 1}
    assert config_reference.unknown_docs(more) == config_reference.unknown_docs(docs) + ["job.no_such_key"]


def test_the_loader_is_what_names_the_keys():
    """The key list comes from the loader's own refusal of an unknown key, section by section."""
    keys = config_reference.model_keys()
    assert {"kafka.bootstrap_servers", "job.metrics.port", "routes[].sequence_by", "policy.type_change",
            "maintenance.transient_file_codec", "unmatched"} <= set(keys)
    assert len(keys) == len(set(keys))


def test_every_documented_key_has_a_meaning_and_an_example():
    for path, entry in config_reference.load_docs()["keys"].items():
        assert entry.get("doc", "").strip(), path
        assert "example" in entry, path


def test_reference_shows_type_default_and_allowed_values():
    page = config_reference.render()
    section = page.split("### `kafka.catch_up`", 1)[1].split("### ", 1)[0]
    assert "| type | string |" in section and "| default | `turns` |" in section
    assert "| allowed | `turns`, `even` |" in section and "catch_up: even" in section


def test_cli_reference_lists_every_command_and_option():
    page = cli_reference.render()
    for name, _, sub in cli_reference._subcommands(build_parser()):
        assert f"## `icerouter {name}`" in page
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}`" in page.split(f"## `icerouter {name}`", 1)[1], (name, option)
    assert "`--version`" in page and "| 3 |" in page


def test_benchmark_rows_cite_files_that_exist():
    for name in bench_tables.cited_files():
        assert (ROOT / "benchmarks" / name).is_file(), name


@pytest.mark.parametrize("row", bench_tables.JOB + bench_tables.COMPONENTS, ids=lambda r: r.source)
def test_every_benchmark_figure_comes_from_its_json(row, tmp_path, monkeypatch):
    """Change the JSON and the figure changes: nothing in a row is typed by hand."""
    import json

    before = row.cells()[1]
    data = json.loads((ROOT / "benchmarks" / row.source).read_text())

    def scale(value):
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return value * 3 + 1
        if isinstance(value, dict):
            return {k: scale(v) for k, v in value.items()}
        if isinstance(value, list):
            return [scale(v) for v in value]
        return value

    for other in (ROOT / "benchmarks").glob("*.json"):  # a row may compare its file with another, unchanged
        (tmp_path / other.name).write_bytes(other.read_bytes())
    (tmp_path / row.source).write_text(json.dumps(scale(data)))
    monkeypatch.setattr(bench_tables, "BENCHMARKS", tmp_path)
    assert row.cells()[1] != before
