"""A raw snapshot to figures: assemble.py per filesystem and phase, attribution.py with the cause
rules of rules/*.toml (plain data in and out)."""
