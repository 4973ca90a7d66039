"""Dataset names of OpenLineage events: which topic feeds which table, named as the spec names them.

Kafka (the spec's naming table): namespace `kafka://{bootstrap server host}:{port}` of the first
bootstrap server, name the topic. Iceberg tables by their catalog: a Glue catalog as the spec names
Glue tables (`arn:aws:glue:{region}:{account}`, `table/{database}/{table}`), a Hive metastore as
Hive tables (`hive://{host}:{port}`, `{database}.{table}`), a REST catalog by its URI's scheme, host
and port (`{namespace}.{table}`), any other (SQL) catalog `iceberg://{catalog name}`. Nothing
secret is ever part of a name: no user info, no path, no query of a URI.
"""

from __future__ import annotations

from typing import Iterable
from urllib.parse import urlsplit

from router.config import CatalogConfig, RouterConfig
from router.routing import RoutingTable
from router.exceptions import TableNameError


def kafka_namespace(bootstrap_servers: str) -> str:
    """`kafka://host:port` of the first bootstrap server (a `SASL_SSL://` style prefix dropped)."""
    first = bootstrap_servers.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        host, port = first, "9092"
    return f"kafka://{host}:{port}"


def _host_port(uri: str, default_port: int) -> str:
    parts = urlsplit(uri)
    return f"{parts.hostname or 'localhost'}:{parts.port or default_port}"


def catalog_type(catalog: CatalogConfig) -> str:
    props = catalog.properties
    kind = str(props.get("type") or "").lower()
    if kind:
        return kind
    uri = str(props.get("uri") or "")
    if uri.startswith(("http://", "https://")):
        return "rest"
    if uri.startswith("thrift://"):
        return "hive"
    return "sql"


def table_dataset(catalog: CatalogConfig, table: str) -> tuple[str, str]:
    """(namespace, name) of an Iceberg table `ns.table` in `catalog`."""
    props, kind = catalog.properties, catalog_type(catalog)
    database, _, name = table.rpartition(".")
    if kind == "glue":
        region = props.get("glue.region") or props.get("client.region") or "unknown"
        account = props.get("glue.id") or "unknown"
        return f"arn:aws:glue:{region}:{account}", f"table/{database}/{name}"
    if kind == "hive" and props.get("uri"):
        return f"hive://{_host_port(str(props['uri']), 9083)}", table
    if kind == "rest" and props.get("uri"):
        uri = str(props["uri"])
        return f"{urlsplit(uri).scheme}://{_host_port(uri, 443 if uri.startswith('https') else 80)}", table
    return f"iceberg://{catalog.name}", table


def table_sources(config: RouterConfig, topics: Iterable[str], tables: Iterable[str] = (),
                  routing: RoutingTable | None = None) -> dict[str, set[str]]:
    """table -> the topics (of `topics`) whose routes write it.

    Tables named from the topic alone are rendered exactly; a table named from a header or a field
    value (`{header.tenant}.events`) is fed by the topics of every route that can name it, so each
    of `tables` (those a batch committed) that no route renders statically is credited to those.
    """
    routing = routing or RoutingTable(config.routes, config.tables, config.dlq)
    out: dict[str, set[str]] = {}
    dynamic: set[str] = set()
    for topic in topics:
        for route in routing.routes_for_topic(topic):
            if route.named_by_data:
                dynamic.add(topic)
                continue
            try:
                out.setdefault(routing.render(route, topic), set()).add(topic)
            except TableNameError:
                continue
    for table in tables:
        if table not in out and table != config.dlq.table and dynamic:
            out[table] = set(dynamic)
    return out
