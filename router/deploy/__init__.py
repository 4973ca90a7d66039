"""Deployment: `icerouter pack`, the job's Python environment as one archive for a Spark cluster."""

from router.deploy.distributions import PackError
from router.deploy.pack import EXECUTOR_PYTHON, PackResult, describe_nodes, pack

__all__ = ["EXECUTOR_PYTHON", "PackError", "PackResult", "describe_nodes", "pack"]
