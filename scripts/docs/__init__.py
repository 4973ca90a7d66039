"""Generated documentation: the configuration and CLI references and the benchmark tables
(`python scripts/gen_docs.py` writes them; tests/docs checks they are up to date)."""
