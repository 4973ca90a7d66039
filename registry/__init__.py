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
from registry.client import CachedRegistry, get_registry
from registry.config import RegistryConfig
from registry.decode import (
    DecodedGroup, DecodeFailure, DecodeResult, ERROR_CLASSES, decode_keys, decode_values,
)
from registry.exceptions import (
    DecodeError, RegistryError, RegistryUnavailable, SchemaNotFound, UnsupportedSchemaType,
    WireFormatError,
)

__all__ = [
    "CachedRegistry", "get_registry", "RegistryConfig", "decode_values", "decode_keys",
    "DecodeResult", "DecodedGroup", "DecodeFailure", "ERROR_CLASSES", "RegistryError",
    "RegistryUnavailable", "SchemaNotFound", "UnsupportedSchemaType", "WireFormatError",
    "DecodeError",
]
