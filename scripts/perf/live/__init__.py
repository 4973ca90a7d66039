"""The whole product on a local stack (scripts/bench.py): one module per mode, cli.py picks one."""
