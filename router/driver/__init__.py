"""Driver side of the job: start the query, dispatch each batch, commit every table, keep them tidy.

Runs once, in the Spark driver process. It may use the executor side (to hand
tasks their entry point); the executor side never imports this package.
"""
