"""Schema Registry access, wire format and decoding of Kafka values to Arrow.

Typical executor-side use (only the picklable config travels to executors)::

    from registry import RegistryConfig, decode_values, get_registry

    result = decode_values(get_registry(config), batch.column("value"),
                           headers=batch.column("headers").to_pylist())
    for group in result.groups:      # one Arrow batch per writer schema
        ...                          # group.indices -> input row positions
    for failure in result.failures:  # tombstone / wire_format / decode_error ...
        ...
"""
from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it. Imported on first use (PEP 562): `registry.config`, which
#: the job's configuration reads, must not pull in the client, fastavro and pyarrow (`icerouter --help`
#: and the job's start, which launches the JVM right after reading its configuration).
_EXPORTS = {
    "CachedRegistry": "registry.client", "get_registry": "registry.client",
    "RegistryConfig": "registry.config",
    "DecodedGroup": "registry.decode", "DecodeFailure": "registry.decode", "DecodeResult": "registry.decode",
    "ERROR_CLASSES": "registry.decode", "decode_keys": "registry.decode", "decode_values": "registry.decode",
    "DecodeError": "registry.exceptions", "RegistryError": "registry.exceptions",
    "RegistryUnavailable": "registry.exceptions", "SchemaNotFound": "registry.exceptions",
    "UnsupportedSchemaType": "registry.exceptions", "WireFormatError": "registry.exceptions",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'registry' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
