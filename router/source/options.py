"""Options of the Kafka streaming source, as one small frozen dataclass.

Spark passes DataSource options as strings, so the whole object round-trips
through ``to_json`` / ``from_json`` under a single option key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Mapping, Union

from router.source.exceptions import SourceOptionsError
from router.source.offsets import CATCH_UP_MODES

#: The DataSource option key that carries the JSON form of KafkaSourceOptions.
OPTIONS_KEY = "icerouter.options"

#: librdkafka settings whose values must never be printed.
SECRET_KEY_PATTERN = re.compile(r"(password|secret|token|key\.pem|keystore|credentials|jaas)", re.I)

StartingOffsets = Union[str, Mapping[str, Mapping[int, int]]]

MASK = "***"


def mask_config(config: Mapping[str, str]) -> dict[str, str]:
    """Return a copy of a client config with secret values replaced by ``***``."""
    return {k: (MASK if SECRET_KEY_PATTERN.search(k) else v) for k, v in config.items()}


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Where to read, what to subscribe to and how much per micro-batch.

    ``client_config`` is passed through to librdkafka unchanged (security.protocol,
    sasl.*, ssl.*, isolation.level, fetch sizes ...). Exactly one of ``topics``
    or ``pattern`` must be given; a pattern is a full-match regex re-evaluated
    on every trigger, and topics that start matching later are read from their
    earliest offset. ``include_headers=False`` drops the headers column (as
    Spark's ``includeHeaders=false``): an array<struct> column costs Spark about
    as much as all other columns together on the way to mapInArrow.
    ``null_empty_headers=False`` gives records without headers an empty list
    instead of Spark's null: Spark 4.3 moves null array<struct> values to
    mapInArrow several times slower than empty ones. ``catch_up`` says how a
    backlog larger than ``max_records_per_trigger`` is shared: ``turns`` (whole
    backlogs, partition after partition) or ``even`` (every partition a share
    of every batch); see router/source/offsets.take_turns.
    """

    bootstrap: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    client_config: Mapping[str, str] = field(default_factory=dict)
    starting_offsets: StartingOffsets = "earliest"
    max_records_per_trigger: int | None = None
    catch_up: str = "turns"
    target_tasks: int | None = None
    poll_timeout: float = 1.0
    max_idle_polls: int = 30
    include_headers: bool = True
    null_empty_headers: bool = True
    sealed: str | None = None  # the client config is in this sealed file (router/source/sealed.py)
    # per-table commit cadence (router/source/cadence.py): {"routes": [[topic, table, seconds, records]],
    # "trigger_seconds": s, "waiting_file": where the planner says what waits}; None: every batch
    cadence: Mapping | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "client_config", {str(k): str(v) for k, v in self.client_config.items()})
        if isinstance(self.starting_offsets, Mapping):
            normalized = {
                str(t): {int(p): int(o) for p, o in parts.items()}
                for t, parts in self.starting_offsets.items()
            }
            object.__setattr__(self, "starting_offsets", normalized)
        self.validate()

    def validate(self) -> None:
        if not self.bootstrap:
            raise SourceOptionsError("bootstrap servers are required")
        if bool(self.topics) == bool(self.pattern):
            raise SourceOptionsError("give exactly one of topics or pattern")
        if self.pattern:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise SourceOptionsError(f"invalid topic pattern {self.pattern!r}: {exc}") from None
        if isinstance(self.starting_offsets, str) and self.starting_offsets not in ("earliest", "latest"):
            raise SourceOptionsError(
                f"starting_offsets must be 'earliest', 'latest' or a mapping, got {self.starting_offsets!r}"
            )
        if self.max_records_per_trigger is not None and self.max_records_per_trigger <= 0:
            raise SourceOptionsError("max_records_per_trigger must be positive")
        if self.catch_up not in CATCH_UP_MODES:
            raise SourceOptionsError(f"catch_up must be one of {', '.join(CATCH_UP_MODES)}, got {self.catch_up!r}")
        if self.target_tasks is not None and self.target_tasks <= 0:
            raise SourceOptionsError("target_tasks must be positive")
        if self.poll_timeout <= 0 or self.max_idle_polls <= 0:
            raise SourceOptionsError("poll_timeout and max_idle_polls must be positive")

    def matches(self, topic: str) -> bool:
        """True if ``topic`` belongs to the subscription (internal topics never do)."""
        if self.topics:
            return topic in self.topics
        return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None

    def to_json(self) -> str:
        """Serialize for a Spark string option (secrets included: it is the real config)."""
        doc = {
            "bootstrap": self.bootstrap,
            "topics": list(self.topics),
            "pattern": self.pattern,
            "client_config": dict(sorted(self.client_config.items())),
            "starting_offsets": (
                self.starting_offsets
                if isinstance(self.starting_offsets, str)
                else {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(self.starting_offsets.items())}
            ),
            "max_records_per_trigger": self.max_records_per_trigger,
            "catch_up": self.catch_up,
            "target_tasks": self.target_tasks,
            "poll_timeout": self.poll_timeout,
            "max_idle_polls": self.max_idle_polls,
            "include_headers": self.include_headers,
            "null_empty_headers": self.null_empty_headers,
            "sealed": self.sealed,
            "cadence": self.cadence,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "KafkaSourceOptions":
        try:
            doc = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise SourceOptionsError(f"source options are not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise SourceOptionsError("source options must be a JSON object")
        doc["topics"] = tuple(doc.get("topics") or ())
        try:
            return cls(**doc)
        except TypeError as exc:
            raise SourceOptionsError(f"unknown or missing source option: {exc}") from None

    def sealed_with(self, name: str) -> "KafkaSourceOptions":
        """These options without their client config, which the sealed file `name` holds instead: what
        a Spark option may carry (the config holds the SASL and TLS secrets)."""
        return replace(self, client_config={}, sealed=name)

    def resolved(self) -> "KafkaSourceOptions":
        """The options with their client config, read from the sealed file when they were sealed."""
        if self.sealed is None:
            return self
        from router.source.sealed import unseal  # deferred: needs pyspark, in a Spark process

        return replace(self, client_config=unseal(self.sealed)["client_config"], sealed=None)

    def __repr__(self) -> str:
        subscription = f"topics={list(self.topics)!r}" if self.topics else f"pattern={self.pattern!r}"
        return (
            f"KafkaSourceOptions(bootstrap={self.bootstrap!r}, {subscription}, "
            f"client_config={mask_config(self.client_config)!r}, "
            f"starting_offsets={self.starting_offsets!r}, "
            f"max_records_per_trigger={self.max_records_per_trigger!r}, catch_up={self.catch_up!r}, "
            f"target_tasks={self.target_tasks!r}, poll_timeout={self.poll_timeout!r}, "
            f"include_headers={self.include_headers!r})"
        )

    __str__ = __repr__


def source_options(config) -> KafkaSourceOptions:
    """The source's options from a loaded configuration (`router.config.RouterConfig`): the job's
    stream and the commands that ask the broker without Spark (`status`, `dlq`) read the same."""
    kafka = config.kafka
    return KafkaSourceOptions(
        bootstrap=kafka.bootstrap_servers,
        topics=tuple(kafka.topics),
        pattern=kafka.pattern,
        client_config={k: str(v) for k, v in kafka.client.items()},
        starting_offsets=kafka.starting_offsets,
        max_records_per_trigger=kafka.max_records_per_batch,
        catch_up=kafka.catch_up,
    )
