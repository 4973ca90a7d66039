"""OpenLineage run events of the job, `maintain` and `dlq replay` (docs/monitoring.md#lineage).

Driver side only: the dispatcher hands each batch's tables and topics to a background sender
(router/lineage/emitter.py) that builds and sends the events; a batch never waits for it, and an
event that cannot be built or sent is logged and dropped. Inputs are the Kafka topics (the
spec's naming, router/lineage/naming.py), outputs the Iceberg tables with their schema,
column-lineage and catalog facets (router/lineage/events.py). Off unless `lineage.transport` is
set; the openlineage-python client is an extra (`pip install icerouter[lineage]`).
"""
