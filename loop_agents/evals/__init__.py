"""Task sets for `loop-agents eval`: the bundled sets live in ``data/`` as JSONL files."""
