"""The input of the HTML report: a run directory (result.json) or a spec's output (index.json),
as groups of runs of one workload, each with its comparisons (profiler.analysis.compare). Plain data."""

from dataclasses import dataclass, field
from pathlib import Path

from ...analysis import compare
from ...errors import FsprofError
from ...rundir import INDEX_FILE, RESULT_FILE, load, load_index


@dataclass
class Column:
    """One filesystem measurement on the page: a filesystem of a run, or one run of a spec."""

    name: str
    run_dir: Path
    result: dict
    fs: dict
    order: tuple = ()  # where it goes among its group's columns


@dataclass
class Group:
    """The runs of one workload, shown side by side."""

    title: str
    columns: list
    comparisons: list = field(default_factory=list)  # compare.compare_pair dicts
    no_comparison: str = ""  # why there is none, when there is none
    failed: list = field(default_factory=list)  # index entries of runs that failed


def workload_text(result):
    w = result["workload"]
    if w["name"] == "record":
        return f"recorded: {w['target']}, {w['duration_s']:.1f} s ({w['ended_by']})"
    if w["name"] == "command":
        return " ".join(w["argv"])
    return " ".join([w["name"], *w.get("args", [])])


def groups_of(path):
    path = Path(path)
    if (path / RESULT_FILE).is_file():
        return [_run_group(path)]
    if (path / INDEX_FILE).is_file():
        return _spec_groups(path)
    raise FsprofError(
        f"{path} is neither an fsprof run directory (no {RESULT_FILE}) nor a spec's output (no {INDEX_FILE})"
    )


def _run_group(path):
    result = load(path)
    group = Group(workload_text(result), [Column(fs["label"], path, result, fs) for fs in result["filesystems"]])
    if len(group.columns) < 2:
        group.no_comparison = f"{len(group.columns)} filesystem(s) in this run: nothing to compare"
    else:
        try:
            group.comparisons = compare.compare([path])
        except FsprofError as e:
            group.no_comparison = str(e)
    return group


def _spec_groups(path):
    index = load_index(path)
    repeats = index.get("repeats", 1) > 1
    groups, configs = {}, {}
    for run in index["runs"]:
        group = groups.setdefault(run["workload"], Group(run["workload"], []))
        configs.setdefault(run["config"], len(configs))
        if "error" in run:
            group.failed.append(run)
            continue
        result = load(path / run["dir"])
        group.title = f"{run['workload']}: {workload_text(result)}"
        for fs in result["filesystems"]:
            name = run["config"] if len(result["filesystems"]) == 1 else f"{run['config']}/{fs['label']}"
            column = Column(name + (f" #{run.get('repeat', 1)}" if repeats else ""), path / run["dir"], result, fs)
            column.order = (configs[run["config"]], run.get("repeat", 1))
            group.columns.append(column)
    for group in groups.values():  # a configuration's repeats side by side (the index interleaves them)
        group.columns.sort(key=lambda c: c.order)
    _add_comparisons(path, groups)
    return list(groups.values())


def _add_comparisons(path, groups):
    """compare.compare of the whole output, each comparison to its workload's group."""
    try:
        found = compare.compare([path])
    except FsprofError as e:
        for group in groups.values():
            group.no_comparison = str(e)
        return
    first = next(iter(groups.values()))
    for c in found:
        (groups.get(c.get("workload")) or groups.get(c["base"].split("/", 1)[0]) or first).comparisons.append(c)
    for group in groups.values():
        if not group.comparisons:
            group.no_comparison = "one configuration of this workload: nothing to compare it with"
