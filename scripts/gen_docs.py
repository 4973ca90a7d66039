"""Write the generated parts of the documentation; `--check` says which are out of date.

    python scripts/gen_docs.py            # regenerate
    python scripts/gen_docs.py --check    # exit 1 and name the stale files (tests/docs runs this)

Generated: docs/reference/configuration.md (from the config model and
scripts/docs/config_keys.yaml), docs/reference/cli.md (from the argument parser), the Grafana
dashboard and Prometheus rules under conf/ (router/observability/), and the
benchmark tables between `<!-- BEGIN GENERATED: name -->` / `<!-- END GENERATED: name -->` in
docs/benchmarks.md and README.md (from benchmarks/*.json, scripts/bench_tables.py). Run it after
adding a config key, a command or an option, or a benchmark run that supersedes a cited one.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts import bench_tables  # noqa: E402
from scripts.docs import cli_reference, config_reference  # noqa: E402
from router.observability.alerts import alert_rules_yaml  # noqa: E402
from router.observability.dashboard import dashboard_json  # noqa: E402

#: whole files, written from scratch
PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/configuration.md": config_reference.render,
    "docs/reference/cli.md": cli_reference.render,
    # shipped beside the docs: what `icerouter observability dashboard|alerts` prints
    "conf/grafana/icerouter-dashboard.json": dashboard_json,
    "conf/prometheus/icerouter-alerts.yaml": alert_rules_yaml,
}
#: (file, region) -> the region's text, between its markers
REGIONS: dict[tuple[str, str], Callable[[], str]] = {
    ("docs/benchmarks.md", "bench-job"): bench_tables.job_table,
    ("docs/benchmarks.md", "bench-components"): bench_tables.components_table,
    ("README.md", "bench-headline"): bench_tables.readme_table,
}


def _region(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- BEGIN GENERATED: {re.escape(name)} [^\n]*-->\n)(.*?)(<!-- END GENERATED: {re.escape(name)} -->)",
                      re.S)


def expected() -> dict[str, str]:
    """Every generated file's text as it should be (regions filled in the file's current text)."""
    out = {path: render() for path, render in PAGES.items()}
    for (path, name), render in REGIONS.items():
        text = out.get(path) or (ROOT / path).read_text()
        pattern = _region(name)
        if not pattern.search(text):
            raise SystemExit(f"{path}: no <!-- BEGIN GENERATED: {name} ... --> / <!-- END GENERATED: {name} --> markers")
        body = render().rstrip("\n") + "\n"
        out[path] = pattern.sub(lambda m: m.group(1) + body + m.group(3), text, count=1)
    return out


def stale() -> list[str]:
    return [path for path, text in expected().items()
            if not (ROOT / path).exists() or (ROOT / path).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the documentation's generated pages and tables.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated part is stale")
    args = parser.parse_args(argv)
    if args.check:
        out_of_date = stale()
        for path in out_of_date:
            print(f"{path}: out of date (run python scripts/gen_docs.py)", file=sys.stderr)
        return 1 if out_of_date else 0
    for path, text in expected().items():
        target = ROOT / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
