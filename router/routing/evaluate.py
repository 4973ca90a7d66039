"""Which rows of a decoded batch go to which table, for one route: one answer for every caller.

The executors call this on each batch of one topic and one writer schema;
plan and check go through the same `RoutingTable.render` for the tables they
can name. Everything is column-wise: a header regex or a field value list is a
mask over the batch, and a table template that depends on data is rendered
once per distinct value combination, never per record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from router.exceptions import RouteError
from router.routing.columns import field_column
from router.routing.routes import CompiledRoute, RoutingTable

#: header name -> that header's value per row of the batch (string array, null when absent)
HeaderColumn = Callable[[str], pa.Array]


@dataclass
class Destination:
    """Rows of the batch headed for one table, or refused with the routing error."""

    rows: pa.Array | None  # int64 positions in the batch; None: every row of it
    table: str | None = None
    error: RouteError | None = None

    def take(self, data: pa.RecordBatch | pa.Table | pa.Array):
        """`data` (aligned with the batch) restricted to these rows."""
        if self.rows is None:
            return data
        if isinstance(data, pa.Array):
            return pc.take(data, self.rows)
        return data.take(self.rows)


def _mask(route: CompiledRoute, batch, header_cols: dict, field_cols: dict) -> pa.Array | None:
    """Rows whose headers and fields all match the route (None: the route has no such condition)."""
    mask = None
    for name, rx in route.headers:
        col = header_cols[name]
        m = pc.and_kleene(pc.is_valid(col), pc.match_substring_regex(col, f"^(?:{rx.pattern})$"))
        mask = m if mask is None else pc.and_(mask, m)
    for name, allowed in route.fields:
        col = field_cols[name]
        m = pc.is_in(col, value_set=pa.array(list(allowed), type=col.type)) if not pa.types.is_null(col.type) \
            else pa.array([False] * batch.num_rows)
        m = pc.fill_null(m, False)
        mask = m if mask is None else pc.and_(mask, m)
    return None if mask is None else pc.fill_null(mask, False)


def evaluate_route(routing: RoutingTable, route: CompiledRoute, topic: str, batch: pa.RecordBatch | pa.Table,
                   header_column: HeaderColumn) -> list[Destination]:
    """The tables `route` sends the rows of `batch` (one topic, one writer schema) to."""
    header_cols = {name: header_column(name) for name in route.header_names}
    field_cols = {}
    for name in route.field_names:
        col = field_column(batch, name)
        field_cols[name] = pa.nulls(batch.num_rows) if col is None else col
    mask = _mask(route, batch, header_cols, field_cols)
    selected = None
    if mask is not None:
        if not pc.any(mask).as_py():
            return []
        selected = pc.indices_nonzero(mask).cast(pa.int64())
        header_cols = {k: pc.filter(v, mask) for k, v in header_cols.items()}
        field_cols = {k: pc.filter(v, mask) for k, v in field_cols.items()}
    dynamic = [p for p in route.placeholders if p != "topic"]
    if not dynamic:
        try:
            return [Destination(selected, table=routing.render(route, topic))]
        except RouteError as exc:
            return [Destination(selected, error=exc)]
    # The table name depends on data: render once per distinct value combination.
    keys = [header_cols[p[7:]] if p.startswith("header.") else field_cols[p[6:]] for p in dynamic]
    combos = pa.table({str(i): k.cast(pa.string()) if not pa.types.is_string(k.type) else k
                       for i, k in enumerate(keys)})
    combos = combos.append_column("__row", pa.array(range(len(combos)), pa.int64()))
    grouped = combos.group_by([str(i) for i in range(len(keys))]).aggregate([("__row", "list")])
    out = []
    for entry in grouped.to_pylist():
        values = [entry[str(i)] for i in range(len(keys))]
        headers = {p[7:]: v for p, v in zip(dynamic, values) if p.startswith("header.")}
        fields = {p[6:]: v for p, v in zip(dynamic, values) if p.startswith("field.")}
        idx = pa.array(entry["__row_list"], pa.int64())
        rows = idx if selected is None else pc.take(selected, idx)
        try:
            out.append(Destination(rows, table=routing.render(route, topic, headers, fields)))
        except RouteError as exc:
            out.append(Destination(rows, error=exc))
    return out
