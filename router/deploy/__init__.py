"""Deployment: `icerouter pack`, the job's Python environment as one archive for a Spark cluster.

router.deploy.pack.pack builds it; router.deploy.distributions resolves what goes in. Nothing is
imported here: the command line reads router.deploy.defaults without the packer's imports.
"""
