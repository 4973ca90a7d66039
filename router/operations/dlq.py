"""`icerouter dlq list / summary`: the dead letters as text or JSON (the replay: replay.py).

Why apart from the replay: listing reads a few columns and changes nothing; it is what an
operator runs first, to choose what to replay (by reason, table, topic, time range).
"""

from __future__ import annotations

import contextlib
import json
from typing import Iterator

from router.config import RouterConfig
from router.exceptions import ServiceUnavailable
from router.operations.letters import LIST_COLUMNS, Selection, read_letters, summarize


@contextlib.contextmanager
def catalog_reached(config: RouterConfig) -> Iterator[None]:
    """A catalog that does not answer, or does not exist (it is never created here), becomes
    ServiceUnavailable (exit 3) naming its URL."""
    from router.planning.services import CatalogReader, unreachable

    CatalogReader.open(config.catalog)
    try:
        yield
    except ServiceUnavailable:
        raise
    except Exception as exc:
        if unreachable(exc):
            raise CatalogReader._unavailable(config.catalog.url, config.catalog.name, exc) from None
        raise


def summary(config: RouterConfig, selection: Selection, fmt: str = "text") -> str:
    with catalog_reached(config):
        letters = read_letters(config.catalog, config.dlq.table, selection,
                               columns=("error_class", "table_name", "topic", "failed_at"))
    doc = {"table": config.dlq.table, "selection": selection.describe(), **summarize(letters)}
    if fmt == "json":
        return json.dumps(doc, indent=1, sort_keys=True)
    lines = [f"{doc['total']} dead letter(s) in {config.dlq.table} ({doc['selection']})"]
    if doc["total"]:
        lines.append(f"failed between {doc['first']} and {doc['last']}")
    for title, key in (("by reason", "by_reason"), ("by table", "by_table"), ("by topic", "by_topic")):
        if doc[key]:
            lines.append(f"{title}:")
            lines += [f"  {name or '(none)'}: {count}" for name, count in sorted(doc[key].items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def list_letters(config: RouterConfig, selection: Selection, fmt: str = "text", limit: int = 100) -> str:
    with catalog_reached(config):
        letters = read_letters(config.catalog, config.dlq.table, selection, columns=LIST_COLUMNS)
    letters = letters.sort_by([("failed_at", "ascending"), ("topic", "ascending"), ("partition", "ascending"),
                               ("offset", "ascending")])
    total = letters.num_rows
    if limit:
        letters = letters.slice(0, limit)
    rows = letters.to_pylist()
    if fmt == "json":
        return json.dumps({"total": total, "shown": len(rows), "letters": rows}, indent=1, default=str)
    lines = [f"{r['failed_at']:%Y-%m-%d %H:%M:%S} {r['topic']}/{r['partition']}@{r['offset']} "
             f"{r['error_class']} -> {r['table_name'] or '-'}: {(r['reason'] or '').splitlines()[0][:200] if r['reason'] else ''}"
             for r in rows]
    if total > len(rows):
        lines.append(f"... {total - len(rows)} more (--limit 0 shows all)")
    return "\n".join(lines) if lines else "no dead letters"
