"""`python -m router.cli ...`, the same as the `icerouter` console script."""

from router.cli.commands import main

if __name__ == "__main__":
    raise SystemExit(main())
