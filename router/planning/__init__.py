"""`icerouter plan` (what a schema would change in the tables) and `icerouter check` (the CI gate).

Read-only: both combine routes, the registry and evolution/ through the same
decisions as the job (router/decisions.py), without writing anything.
plan.py: schemas, targets and plans; check.py: registry verdicts and reports;
services.py: reaching the registry and the catalog ("could not decide").
"""
