"""Change streams (upsert / Debezium CDC): decoded Kafka records -> the last change per key.

Modules: ``envelope`` (pure schema logic shared with ``plan`` / ``check``: the
table a Debezium envelope fills, default and usable key columns), ``extract``
(executor side: records -> changes or dead letters), ``dedup`` (the last change
per key of a batch, column-wise).

Ordering (details in ``dedup``): offset order within a topic-partition;
``sequence_by`` orders changes of one key across partitions and topics; equal
sequence values from different partitions: op priority c < r < u < d, then offset.

Dead-lettered, each row with its reason, nothing else held up (``extract``):
an unknown or null Debezium ``op`` (``t`` truncate and ``m`` message included),
a c/r/u without ``after``, a key column that is null or cannot be found (in the
row nor in the Kafka key), a Kafka key that does not decode where it is needed,
a delete without ``before`` and without a usable Kafka key, an upsert
tombstone without a usable Kafka key, a value without the ``sequence_by`` field.
Consumed without effect: Debezium-mode tombstones (the delete before them did the work).
"""
