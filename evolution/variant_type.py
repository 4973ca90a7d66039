"""Iceberg's ``variant`` type, taught to pyiceberg 0.12 (which cannot parse a schema holding one).

Why a shim: icerouter reads and writes every schema through pyiceberg's ``Schema``
model, and pyiceberg 0.12.0 (the newest release) refuses ``"type": "variant"`` with
``Unsupported field type: 'variant'``. Variant columns (a route's drifting JSON kept
as one semi-structured value, registry/variant_encode.py) need the type in the
table schema, so :func:`install` patches the five places pyiceberg meets a type:

* type parsing: ``IcebergType.handle_primitive_type`` also answers ``"variant"``
  (table metadata, ``NestedField`` and list / map element types all go through it);
* Iceberg -> Arrow (``schema_to_pyarrow`` and every per-primitive visitor): a
  variant is the unshredded Parquet group ``struct<metadata: binary, value: binary>``
  (both required), physical type ``BYTE_ARRAY``;
* Arrow -> Iceberg (``pyarrow_to_schema``, used by the write projection and by
  pyiceberg's reads of our files for compaction): a struct of exactly those two
  binary children *without field ids* is a variant (an Iceberg struct's children
  always carry ids in a data file, so no real struct is taken for one);
* statistics: no bounds or counts (the spec gives variant columns none without
  shredding); the two Parquet leaves' sizes count towards the column's size.

``VariantType`` is a ``PrimitiveType`` subclass so every pre-order and
with-partner visitor (name mapping, fresh ids, projection, icerouter's evolution
plan) treats it as an opaque leaf: nothing is ever added under a variant column.
Its ``minimum_format_version`` is 3, so pyiceberg's own format check refuses it
on a v2 table, as the spec does.

Installed by router/catalog/__init__.py (every table load goes through that
package) and evolution/arrow.py (schema -> Arrow); importing this module alone
patches nothing and loads neither pyarrow nor pyiceberg's I/O (the command line
and the source planner import it through router.decisions and must stay light).

Coupling: written against pyiceberg 0.12.0's private visitor classes and the
singledispatch ``visit_pyarrow``; :func:`install` checks the version and
tests/evolution/test_variant_type.py fails loudly when a pyiceberg upgrade moves
any of them. A pyiceberg release with its own ``VariantType`` makes this module
a re-export (``install`` then leaves pyiceberg alone).
"""
from __future__ import annotations

import threading
import types
from typing import Any, Literal

from pydantic import Field

import pyiceberg
import pyiceberg.types as itypes
from pyiceberg.types import IcebergType, PrimitiveType

__all__ = ["VariantType", "VARIANT_ARROW", "install", "is_variant", "PYICEBERG_TESTED"]

#: the pyiceberg release the patches were written and tested against
PYICEBERG_TESTED = "0.12.0"


def __getattr__(name: str) -> Any:
    """``VARIANT_ARROW``, the Arrow type of a variant column (unshredded), built on first use: the module is
    imported by light processes (the command line, the source planner) that never load pyarrow."""
    if name == "VARIANT_ARROW":
        import pyarrow as pa

        value = pa.struct([pa.field("metadata", pa.large_binary(), nullable=False),
                           pa.field("value", pa.large_binary(), nullable=False)])
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_native = getattr(itypes, "VariantType", None)

if _native is not None:  # pragma: no cover - a pyiceberg that knows the type itself
    VariantType = _native
else:
    class VariantType(PrimitiveType):
        """Iceberg ``variant`` (format v3): any JSON-like value, encoded as Parquet Variant."""

        root: Literal["variant"] = Field(default="variant")

        def minimum_format_version(self) -> Any:
            return 3


def is_variant(t: Any) -> bool:
    return isinstance(t, VariantType)


_installed = False
_lock = threading.Lock()


def _is_variant_storage(t: Any) -> bool:
    """A struct of exactly ``metadata`` and ``value`` binaries with no field ids: a variant's storage."""
    import pyarrow as pa

    if not pa.types.is_struct(t) or t.num_fields != 2:
        return False
    names = sorted(t.field(i).name for i in range(2))
    if names != ["metadata", "value"]:
        return False
    for i in range(2):
        f = t.field(i)
        if not (pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)):
            return False
        if f.metadata and any(k in f.metadata for k in (b"PARQUET:field_id", b"field_id")):
            return False
    return True


def _handle_primitive_type(cls: Any, v: Any, handler: Any) -> Any:
    # runs as pyiceberg.types.IcebergType.handle_primitive_type, with that module's globals (see _patch_parsing)
    if v == "variant":
        return _icerouter_variant_type()  # noqa: F821 - a name _patch_parsing puts in pyiceberg.types
    return _icerouter_handle_primitive_type(cls, v, handler)  # noqa: F821


def _patch_parsing() -> None:
    """pydantic compiled ``handle_primitive_type`` into every model's validator when pyiceberg was imported
    (a struct field's type, a list's element, a map's key and value): rebinding the attribute would reach
    ``NestedField`` alone. So the function keeps its identity and gets a new body that answers
    ``"variant"`` and hands everything else to a copy of the original."""
    func = IcebergType.__dict__["handle_primitive_type"]
    func = getattr(func, "wrapped", func)
    func = getattr(func, "__func__", func)
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    func.__globals__["_icerouter_handle_primitive_type"] = copy
    func.__globals__["_icerouter_variant_type"] = VariantType
    func.__code__ = _handle_primitive_type.__code__


def _patch_primitive_visitors() -> None:
    from pyiceberg.schema import SchemaVisitorPerPrimitiveType

    original = SchemaVisitorPerPrimitiveType.primitive

    def primitive(self: Any, p: PrimitiveType) -> Any:
        if isinstance(p, VariantType):
            visit = getattr(self, "visit_variant", None)
            if visit is None:
                raise ValueError(f"Type not recognized: {p} ({type(self).__name__} cannot handle variant)")
            return visit(p)
        return original(self, p)
    SchemaVisitorPerPrimitiveType.primitive = primitive  # type: ignore[method-assign]


def _patch_arrow() -> None:
    import pyarrow as pa
    import pyiceberg.io.pyarrow as pio

    arrow_type = __getattr__("VARIANT_ARROW")
    pio._ConvertToArrowSchema.visit_variant = lambda self, _: arrow_type  # type: ignore[attr-defined]
    pio.PrimitiveToPhysicalType.visit_variant = lambda self, _: "BYTE_ARRAY"  # type: ignore[attr-defined]

    struct_impl = pio.visit_pyarrow.dispatch(pa.StructType)

    @pio.visit_pyarrow.register(pa.StructType)
    def _(obj: Any, visitor: Any) -> Any:
        if _is_variant_storage(obj):
            if isinstance(visitor, pio._HasIds):
                return True
            if isinstance(visitor, pio._ConvertToIceberg):
                return VariantType()
        return struct_impl(obj, visitor)


def _patch_statistics() -> None:
    import pyiceberg.io.pyarrow as pio

    collector = pio.PyArrowStatisticsCollector.primitive

    def stats_primitive(self: Any, primitive: PrimitiveType) -> Any:
        if isinstance(primitive, VariantType):
            name = self._schema.find_column_name(self._field_id)
            if name is None:
                return []
            return [pio.StatisticsCollector(field_id=self._field_id, iceberg_type=primitive,
                                            mode=pio.MetricsMode(pio.MetricModeTypes.NONE), column_name=name)]
        return collector(self, primitive)
    pio.PyArrowStatisticsCollector.primitive = stats_primitive  # type: ignore[method-assign]

    paths = pio.ID2ParquetPathVisitor.primitive

    def path_primitive(self: Any, primitive: PrimitiveType) -> Any:
        if isinstance(primitive, VariantType):
            base = ".".join(self._path)
            return [pio.ID2ParquetPath(field_id=self._field_id, parquet_path=f"{base}.{leaf}")
                    for leaf in ("metadata", "value")]
        return paths(self, primitive)
    pio.ID2ParquetPathVisitor.primitive = path_primitive  # type: ignore[method-assign]


def install() -> None:
    """Teach pyiceberg the variant type, once per process (idempotent, thread-safe). Called where schemas
    are read or converted: router/catalog/__init__.py (every table load) and evolution/arrow.py."""
    global _installed
    if _installed or _native is not None:
        return
    with _lock:
        if _installed:
            return
        if pyiceberg.__version__ != PYICEBERG_TESTED:
            import warnings
            warnings.warn(f"evolution.variant_type was written for pyiceberg {PYICEBERG_TESTED}, "
                          f"this is {pyiceberg.__version__}: run tests/evolution/test_variant_type.py", stacklevel=2)
        _patch_parsing()
        _patch_primitive_visitors()
        _patch_arrow()
        _patch_statistics()
        _installed = True
