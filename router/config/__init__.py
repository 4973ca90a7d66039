"""The job configuration: YAML in (load.py), typed and validated objects out (model.py)."""

from router.config.load import (
    PARTITION_PATTERN, PARTITION_TRANSFORMS, ROOT_KEYS, STARTING_OFFSETS, TOMBSTONE_MODES, UNMATCHED_MODES,
    load_config, parse_config,
)
from router.config.model import (
    CatalogConfig, CommitAfter, DlqConfig, JobConfig, KafkaConfig, LineageConfig, MaintenanceConfig, MetricsConfig, RouteConfig, RouterConfig,
    TablesConfig,
)
from router.config.reader import interpolate

__all__ = ["CatalogConfig", "CommitAfter", "DlqConfig", "JobConfig", "KafkaConfig", "LineageConfig", "MaintenanceConfig", "MetricsConfig", "RouteConfig",
           "RouterConfig", "TablesConfig", "load_config", "parse_config", "interpolate", "PARTITION_PATTERN",
           "PARTITION_TRANSFORMS", "ROOT_KEYS", "STARTING_OFFSETS", "TOMBSTONE_MODES", "UNMATCHED_MODES"]
