"""SQLite inserts, one row per transaction: the docs/compare.md example of a workload whose time is
decided by how many calls it makes, not by how long one call takes.

    python3 workloads/examples/sqlite_inserts.py --journal-mode delete --synchronous full
    python3 workloads/examples/sqlite_inserts.py --journal-mode wal --synchronous normal

In DELETE mode each transaction creates, fsyncs and unlinks a rollback journal (4 fdatasync/fsync
calls per transaction); in WAL mode with synchronous=NORMAL commits append to the WAL and sync it
only at checkpoints. Prints `RESULT transactions=N` and `RESULT elapsed_s=S`, the lines `fsprof
compare` reads as the workload's own figures (`--unit transaction`).
"""

import argparse
import os
import sqlite3
import sys
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--transactions", type=int, default=1000, help="rows, one transaction each (default 1000)")
    ap.add_argument("--journal-mode", default="delete", choices=("delete", "truncate", "persist", "wal"))
    ap.add_argument("--synchronous", default="full", choices=("off", "normal", "full", "extra"))
    ap.add_argument("--db", default="inserts.db", help="database file (default inserts.db in the cwd)")
    args = ap.parse_args(argv)
    if args.transactions <= 0:
        ap.error(f"--transactions must be a positive number, not {args.transactions}")
    # An absolute path, as applications open their databases: SQLite then names its journal by it.
    db = sqlite3.connect(os.path.abspath(args.db), isolation_level=None)
    db.execute(f"PRAGMA journal_mode={args.journal_mode}")
    db.execute(f"PRAGMA synchronous={args.synchronous}")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")
    start = time.perf_counter()
    for i in range(args.transactions):
        db.execute("BEGIN")
        db.execute("INSERT INTO t (v) VALUES (?)", (f"row {i}",))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    print(f"RESULT transactions={args.transactions}")
    print(f"RESULT elapsed_s={elapsed:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
