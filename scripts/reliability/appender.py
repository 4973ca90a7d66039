"""A third writer: appends rows to a table with plain pyiceberg while jobs commit to it.

    python -m scripts.reliability.appender PROPS_JSON TABLE COUNT [INTERVAL]

Each row carries _kafka_topic = APPENDER_TOPIC, partition 0 and offset i, so
the checks can count it like any Kafka record. Conflicts are retried with a
refresh, as any well-behaved Iceberg writer does. Prints the appended offsets
as JSON on the last line.
"""

from __future__ import annotations

import json
import sys
import time

APPENDER_TOPIC = "appender.manual"


def append_rows(props: dict, identifier: str, count: int, interval: float = 0.2, timeout: float = 240) -> list[int]:
    import pyarrow as pa
    from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

    from scripts.reliability.helpers import load_catalog_from

    catalog = load_catalog_from(props)
    deadline = time.monotonic() + timeout
    while True:
        try:
            table = catalog.load_table(identifier)
            break
        except NoSuchTableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    done: list[int] = []
    for offset in range(count):
        while True:
            schema = table.schema().as_arrow()
            values = {"id": -1 - offset, "_kafka_topic": APPENDER_TOPIC, "_kafka_partition": 0,
                      "_kafka_offset": offset}
            arrays = [pa.array([values.get(f.name)], f.type) for f in schema]
            try:
                table.append(pa.Table.from_arrays(arrays, schema=schema))
                done.append(offset)
                break
            except CommitFailedException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                table = table.refresh()
        time.sleep(interval)
    return done


def main(argv: list[str]) -> int:
    props, identifier, count = json.loads(argv[0]), argv[1], int(argv[2])
    interval = float(argv[3]) if len(argv) > 3 else 0.2
    print(json.dumps(append_rows(props, identifier, count, interval)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
