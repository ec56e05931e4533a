"""The run directory, one owner: its file names and schema ids, where a new one goes, and loading
what a run wrote. `fsprof run` and `record` write RUN/result.json (a spec's output, one result per
run under OUT/<workload>/<config>[/rep<N>] plus OUT/index.json); every view reads them through load()."""

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from .errors import FsprofError

RESULT_FILE = "result.json"
SCHEMA = "fsprof.run/2"  # profiler/schema/result.schema.json, docs/result-schema.md
INDEX_FILE = "index.json"
INDEX_SCHEMA = "fsprof.index/1"
FLAMEGRAPH_DIR = "flamegraphs"
SCHEMA_FILE = Path(__file__).resolve().parent / "schema" / "result.schema.json"


def default_out_dir() -> Path:
    return Path("fsprof-runs") / datetime.now().strftime("%Y%m%d-%H%M%S")


def make_out_dir(output: str | Path | None) -> Path:
    """The run directory `output` (default fsprof-runs/<timestamp>), made, as an absolute path:
    the workload runs with its cwd on the scratch filesystem and writes its result here."""
    out_dir = (Path(output) if output else default_out_dir()).resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FsprofError(f"cannot use {out_dir} as the run directory: {e.strerror}")
    return out_dir


def write_result(run_dir: str | Path, result: dict[str, Any]) -> None:
    (Path(run_dir) / RESULT_FILE).write_text(json.dumps(result, indent=1))


def write_index(out_dir: str | Path, index: dict[str, Any]) -> None:
    (Path(out_dir) / INDEX_FILE).write_text(json.dumps(index, indent=1))


def load(run_dir: str | Path) -> dict[str, Any]:
    """RUN/result.json, checked to be an fsprof result; one sentence if it is not."""
    path = Path(run_dir) / RESULT_FILE
    if not path.is_file():
        raise FsprofError(f"{run_dir} is not an fsprof run directory (no {RESULT_FILE} in it)")
    try:
        result = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FsprofError(f"{path} is not valid JSON ({e})")
    if not isinstance(result, dict) or result.get("schema") != SCHEMA:
        raise FsprofError(f"{path} is not an fsprof result (schema {SCHEMA})")
    return result


def load_index(out_dir: str | Path) -> dict[str, Any]:
    """OUT/index.json of a spec's output; one sentence if it is not one."""
    path = Path(out_dir) / INDEX_FILE
    try:
        index = json.loads(path.read_text())
        runs = index["runs"]
        if not all(isinstance(r, dict) and {"workload", "config", "dir"} <= set(r) for r in runs):
            raise ValueError("a run lacks workload, config or dir")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FsprofError(f"{path} is not an fsprof spec index ({e})")
    return index
