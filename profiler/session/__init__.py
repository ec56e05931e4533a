"""A traced session: `fsprof run` (run.py, with spec matrices), `fsprof record` (record.py), and
the collector both load (collect.py). Imports views/, verify/, analysis/ and below; never commands/."""
