"""Every configuration example is loaded through the real config loader, so none can rot: each
`yaml` block of docs/ and the README (a block without `kafka` and `registry` is merged onto the
minimal configuration first, beside the files under docs/examples/ they name) and each file in conf/. YAML that is not an icerouter config is marked
with a title (```yaml title=".gitlab-ci.yml"```) and is left out here."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from router.config import load_config
from scripts.docs.config_reference import BASE, merge
from tests.docs.helpers import ROOT, code_blocks, markdown_files

ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def examples() -> list:
    out = []
    for path in markdown_files():
        for i, (info, body) in enumerate(code_blocks(path, "yaml")):
            if "title=" not in info:
                out.append(pytest.param(body, id=f"{path.relative_to(ROOT)}[{i}]"))
    return out


def _set_required_env(text: str, monkeypatch) -> None:
    """`${VAR}` without a default must be set, as it would be where the config runs."""
    for name in ENV.findall(text):
        monkeypatch.setenv(name, "http://127.0.0.1:1" if "URL" in name else "x")


@pytest.mark.parametrize("body", examples())
def test_docs_example_loads(body, tmp_path, monkeypatch):
    raw = yaml.safe_load(body)
    assert isinstance(raw, dict), "a yaml block that is not a mapping: give it a title if it is not a config"
    if not {"kafka", "registry"} <= set(raw):
        raw = merge(BASE, raw)
    _set_required_env(body, monkeypatch)
    shutil.copytree(ROOT / "docs" / "examples", tmp_path, dirs_exist_ok=True)  # files examples name (schemas)
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_config(path)


@pytest.mark.parametrize("path", sorted((ROOT / "conf").glob("*.yaml")), ids=lambda p: p.name)
def test_conf_file_loads(path, monkeypatch):
    _set_required_env(path.read_text(), monkeypatch)
    config = load_config(path)
    assert config.routes


def test_examples_are_found():
    """The collection itself: the README's minimal config and the reference's examples are among them."""
    ids = [p.id for p in examples()]
    assert any(i.startswith("README.md") for i in ids)
    documented = len(__import__("scripts.docs.config_reference", fromlist=["load_docs"]).load_docs()["keys"])
    assert sum(i.startswith("docs/reference/configuration.md") for i in ids) == documented + 1  # + the minimal one


def test_a_broken_example_fails(tmp_path):
    """What the test would see if an example named a key the loader no longer accepts."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(merge(BASE, {"job": {"trigger_secs": 2}})))
    with pytest.raises(Exception, match="job: unknown key 'trigger_secs'"):
        load_config(path)
