"""Reading the documentation's sources: Markdown pages and their fenced code blocks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)


def markdown_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]


def code_blocks(path: Path, language: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block in `path` whose language is `language`."""
    out = []
    for m in FENCE.finditer(path.read_text()):
        info = m.group("info").strip()
        if info.split(" ", 1)[0] == language:
            indent = m.group("indent")
            body = "".join(line[len(indent):] if line.startswith(indent) else line
                           for line in m.group("body").splitlines(keepends=True))
            out.append((info, body))
    return out
