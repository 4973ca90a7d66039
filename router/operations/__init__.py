"""Operators' commands beside the job: its state without Spark (`icerouter status`) and the
dead letters (`icerouter dlq`). They read the tables and the broker; they never start Spark."""
