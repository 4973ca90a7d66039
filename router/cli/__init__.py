"""The `icerouter` command line (`router.cli:main`), the demo and the table summary it prints."""

from router.cli.commands import EXIT_BLOCKED, EXIT_OK, EXIT_USAGE, build_parser, main

__all__ = ["EXIT_BLOCKED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]
