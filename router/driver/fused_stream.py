"""Fused read, driver half: register the fused source and re-read a batch for its redirect pass.

The tasks themselves (read, decode, write, yield descriptors) are
router/executor/fused_reader.py.
"""

from __future__ import annotations

import dataclasses

from router.descriptors import DispatchContext
from router.executor.fused_reader import (
    HANDOFF_KEY, SOURCE_NAME, FusedDataSource, process_ranges,
)
from router.source.datasource import RESUME_KEY
from router.source.options import OPTIONS_KEY, KafkaSourceOptions
from router.source.sealed import seal, unseal


def fused_stream(spark, options: KafkaSourceOptions, ctx: DispatchContext, handoff_file: str,
                 resume_json: str | None = None):
    """The streaming DataFrame of descriptor rows (table, descriptor) the fused tasks yield."""
    if options.target_tasks is None:
        # One task per executor core: a task's fixed costs (a fetch answered only once the broker has
        # built it, a data file per table it touches, its commits) do not shrink with its share, so
        # one wave of tasks beat two (throughput run: 4 tasks 117,000 records/s, 2 tasks 126,000,
        # 6 tasks 78,000, on 2 cores); pack_ranges splits hot partitions to keep the wave even.
        options = dataclasses.replace(options, target_tasks=spark.sparkContext.defaultParallelism)
    spark.dataSource.register(FusedDataSource)
    # the secrets (client config, the context's credentials) go in a sealed file, not in an option:
    # Spark shows options in plans, the UI, the event log and DEBUG logs (router/source/sealed.py)
    sealed = options.sealed_with(seal(spark, {"client_config": dict(options.client_config), "context": ctx}))
    return (spark.readStream.format(SOURCE_NAME).option(OPTIONS_KEY, sealed.to_json())
            .option(HANDOFF_KEY, handoff_file).option(RESUME_KEY, resume_json or "").load())


def redirect_pass(spark, options_json: str, task_ranges: list[list[tuple]],
                  ctx: DispatchContext) -> list[tuple[str, bytes]]:
    """Re-read the batch's ranges and dead-letter the records of `ctx.redirect` tables only."""
    if not task_ranges:
        return []
    options = KafkaSourceOptions.from_json(options_json)
    name = seal(spark, {"client_config": dict(options.resolved().client_config), "context": ctx})
    sealed_json = options.sealed_with(name).to_json()  # the task closure carries no secret either

    def run(items):
        context = unseal(name)["context"]
        for ranges in items:
            for out in process_ranges(sealed_json, ranges, context):
                yield from zip(out.column(0).to_pylist(), out.column(1).to_pylist())

    return spark.sparkContext.parallelize(task_ranges, len(task_ranges)).mapPartitions(run).collect()
