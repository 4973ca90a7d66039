"""`icerouter pack`'s defaults, apart so that the command line can show them without importing the packer."""

DEFAULT_OUTPUT = "icerouter-env.tar.gz"
#: gzip level (this environment, 771 MB: level 1 15.8 s -> 266 MB, 6 33 s -> 235 MB, 9 97.5 s -> 233 MB)
COMPRESS_LEVEL = 6
