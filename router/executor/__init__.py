"""Executor side of the job: what a Spark task does with its rows (route, decode, evolve, align, write).

Runs in the Python workers; it returns small descriptors (router/descriptors.py)
and never imports the driver side.
"""
