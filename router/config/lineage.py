"""The `lineage` section: OpenLineage run events (router/lineage/), off unless a transport is given.

The transport is the openlineage-python client's own settings, checked here for what each type
needs so a typo fails the deploy, not the first event: `http` (url, optional endpoint, timeout,
auth), `file` (log_file_path, optional append), `console`, `kafka` (topic, config with
bootstrap.servers, optional flush). Other keys of a type go to the client as they are.
"""

from __future__ import annotations

from typing import Any

from router.config.model import LineageConfig
from router.config.reader import Section
from router.exceptions import ConfigError

LINEAGE_KEYS = ("transport", "namespace", "queue_size")
#: transport type -> (keys it needs, keys it may have besides `type`)
TRANSPORTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "http": (("url",), ("url", "endpoint", "timeout", "verify", "auth", "compression", "custom_headers")),
    "file": (("log_file_path",), ("log_file_path", "append")),
    "console": ((), ()),
    "kafka": (("topic", "config"), ("topic", "config", "flush", "messageKey")),
}
TRANSPORT_TYPES = tuple(TRANSPORTS)


def parse_lineage(data: Any) -> LineageConfig:
    s = Section(data, "lineage", LINEAGE_KEYS)
    transport = s.mapping("transport")
    if transport:
        kind = transport.get("type")
        if kind not in TRANSPORTS:
            raise ConfigError(f"lineage.transport.type: {kind!r} is not one of {', '.join(TRANSPORT_TYPES)}")
        needed, allowed = TRANSPORTS[kind]
        Section(transport, "lineage.transport", ("type", *allowed))  # unknown keys: refused with the list
        for key in needed:
            if transport.get(key) in (None, "", {}):
                raise ConfigError(f"lineage.transport.{key}: required by the {kind} transport")
        if kind == "http" and not str(transport["url"]).startswith(("http://", "https://")):
            raise ConfigError("lineage.transport.url: must start with http:// or https://")
        if kind == "kafka":
            config = Section(transport, "lineage.transport", ("type", *allowed)).mapping("config")
            if not config.get("bootstrap.servers"):
                raise ConfigError("lineage.transport.config: the kafka transport needs bootstrap.servers")
    namespace = s.get("namespace", "icerouter", str)
    if not namespace.strip():
        raise ConfigError("lineage.namespace: must not be empty")
    return LineageConfig(transport, namespace, s.positive("queue_size", 1000))
