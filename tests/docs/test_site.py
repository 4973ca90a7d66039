"""The documentation site builds with `mkdocs build --strict`: a broken link, a missing page or an
unknown anchor fails it (mkdocs.yml's `validation`). Not `-q`: strict mode counts only the warnings
that are logged."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.docs.helpers import DOCS, ROOT


def build(config, site) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_site_builds_strict(tmp_path):
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("index.html", "reference/configuration/index.html", "reference/cli/index.html",
                 "operations/index.html", "ci/index.html", "benchmarks/index.html", "architecture/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


def test_a_broken_link_fails_the_build(tmp_path):
    """The same site with one link to a page that does not exist and one to a missing anchor."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "concepts.md"
    page.write_text(page.read_text() + "\nSee [the missing page](nowhere.md).\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "nowhere.md" in done.stderr

    page.write_text(page.read_text().replace("(nowhere.md)", "(operations.md#no-such-heading)"))
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "no-such-heading" in done.stderr
