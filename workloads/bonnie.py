"""bonnie: a model of bonnie++ (1.96 / 2.00a): sequential output per character, per block and
rewrite; sequential input per character and per block; random seeks by forked seeker processes; then
sequential and random create / stat / delete of -n files. Options, text table and CSV line are
bonnie++'s (bon_csv2txt reads our CSV line). The engine is C (workloads/bonnie.c): this module
checks the options, runs the engine and formats its figures.

To keep reads honest on machines with far more RAM than the test file, the engine writes back
and drops the page cache before every test (outside the measured phases) unless --no-drop-caches.

Over 500 lines: bonnie++'s options, its text table and its CSV line are one interface, kept
beside the engine call they configure.
"""

import dataclasses
import json
import os
import random
import re
import subprocess

from .common import (
    Progress,
    UsageError,
    WorkloadError,
    WorkloadParser,
    buffered_loop_under,
    engine_path,
    run_main,
    write_result,
)

NAME = "bonnie"
MIB = 1 << 20
DEFAULT_SIZE_MIB = 256
DEFAULT_CHUNK = 8192
DEFAULT_SEEKS = 8192
DEFAULT_SEEKERS = 5
MAX_SEEKERS = 1000
MAX_SEEKS = 1 << 24  # the tickets are made up front: 4 bytes each
DIRECTORY_UNIT = 1024  # -n counts files in units of 1024
MAX_DIRS = 99999
MIN_TIME = 0.5  # bonnie++ shows "+++++" for a test that took less
MAX_DATA_PER_FILE = 22 + 6 + 1 + 8  # bonnie++'s memory estimate per file name
CSV_VERSION = "1.98"  # the CSV format of bonnie++ 1.98 to 2.00a
VERSION = "fsprof"  # our entry in the CSV's bonnie_version field
IO_TESTS = ("putc", "write", "rewrite", "getc", "read", "seeks")
FILE_TESTS = ("seq-create", "seq-stat", "seq-delete", "rand-create", "rand-stat", "rand-delete")
DROP_NOTE = "caches: dropped before each test (syncfs, then echo 3 > /proc/sys/vm/drop_caches)"


def parser():
    ap = WorkloadParser(prog=NAME, description="bonnie++'s tests, its options, table and CSV line.")
    ap.add_argument(
        "-s",
        "--size",
        metavar="SIZE[:CHUNK[:SEEKS[:SEEKERS]]]",
        help=f"IO test file in MiB, or with a unit (256M, 2G); chunk bytes (default {DEFAULT_CHUNK}, "
        f"power of 2, 256..1M, 4k allowed), random seeks (default {DEFAULT_SEEKS}) and seeker "
        f"processes (default {DEFAULT_SEEKERS}); 0 skips the IO tests (default {DEFAULT_SIZE_MIB}, "
        "or twice -r)",
    )
    ap.add_argument(
        "-n",
        "--files",
        default="1",
        metavar="NUM[:MAX[:MIN[:DIRS[:CHUNK]]]]",
        help="files for the create tests in multiples of 1024, their largest and smallest size "
        "(bytes, k/m/g allowed; default 0), directories to spread them over, chunk per "
        "write (default 1: 1024 empty files in one directory); 0 skips them",
    )
    ap.add_argument(
        "-r",
        "--ram",
        metavar="MIB",
        help="RAM in MiB: as bonnie++, the file must then be at least twice this (default: "
        "no check, the caches are dropped instead)",
    )
    ap.add_argument(
        "-b",
        "--no-buffering",
        action="store_true",
        help="fsync after every write in the file tests (files and their directory) and after every seek update",
    )
    ap.add_argument(
        "-f",
        "--fast",
        nargs="?",
        const="0",
        metavar="MIB",
        help="skip the per-char tests; with MIB, do them on the first MIB of the file only (default: the whole file)",
    )
    ap.add_argument("-m", "--machine", help="name shown in the table and CSV (default: the host name)")
    ap.add_argument("-z", "--seed", metavar="N", help="random seed, to repeat the same seeks and names")
    ap.add_argument(
        "--no-drop-caches",
        action="store_true",
        help="keep the page cache between tests (reads may then come from memory)",
    )
    return ap


@dataclasses.dataclass
class Plan:
    size_mib: int
    chunk: int
    seeks: int
    seekers: int
    char_mib: int
    files_k: int
    max_size: int
    min_size: int
    dirs: int
    file_chunk: int
    sync: bool
    drop_caches: bool
    machine: str
    seed: int
    ram_mib: int

    @property
    def files(self):
        return self.files_k * DIRECTORY_UNIT

    def engine_args(self):
        args = [
            "--size",
            self.size_mib * MIB,
            "--char-bytes",
            self.char_mib * MIB,
            "--chunk",
            self.chunk,
            "--seeks",
            self.seeks,
            "--seekers",
            self.seekers,
            "--files",
            self.files,
            "--max-size",
            self.max_size,
            "--min-size",
            self.min_size,
            "--dirs",
            self.dirs,
            "--file-chunk",
            self.file_chunk,
            "--seed",
            self.seed,
        ]
        flags = ["--sync"] * self.sync + ["--no-drop-caches"] * (not self.drop_caches)
        return [str(a) for a in args] + flags


# ---------------------------------------------------------------------------------------------------
# Option parsing: bonnie++'s syntax, one sentence per mistake

_NUMBER = re.compile(r"(\d+)([kmgt]?)(?:i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _amount(text, what, example, plain=1):
    """'4k' -> 4096 (a plain number is in units of `plain` bytes), or one sentence."""
    m = _NUMBER.fullmatch(text.strip())
    if not m:
        raise UsageError(f"{NAME}: {what} '{text}' is not a number (e.g. {example})")
    return int(m.group(1)) * (_UNITS[m.group(2).lower()] if m.group(2) else plain)


def _power_of_two_chunk(text, what):
    value = _amount(text, what, "8192 or 4k")
    if value < 256 or value > MIB or value & (value - 1):
        raise UsageError(f"{NAME}: {what} must be a power of two from 256 bytes to 1 MiB, not {text}")
    return value


def _count(text, what, low, high, example):
    value = _amount(text, what, example)
    if not low <= value <= high:
        raise UsageError(f"{NAME}: {what} must be from {low} to {high}, not {text}")
    return value


def _split(spec, option, most):
    parts = spec.split(":")
    if len(parts) > most:
        raise UsageError(f"{NAME}: {option} '{spec}' has more than {most} ':'-separated fields")
    return parts + [""] * (most - len(parts))


def parse_size_spec(spec):
    """-s SIZE[:CHUNK[:SEEKS[:SEEKERS]]] -> (MiB, chunk bytes, seeks, seekers)."""
    size, chunk, seeks, seekers = _split(spec, "-s", 4)
    size_bytes = _amount(size, "-s size", "256 for 256 MiB, 256M, 2G", plain=MIB)
    if size_bytes % MIB:
        raise UsageError(f"{NAME}: -s size '{size}' is not a whole number of MiB, which bonnie++ sizes its file in")
    chunk = _power_of_two_chunk(chunk, "the -s chunk size") if chunk else DEFAULT_CHUNK
    seeks = _count(seeks, "the number of seeks", 1, MAX_SEEKS, "8192") if seeks else DEFAULT_SEEKS
    seekers = _count(seekers, "the number of seeker processes", 1, MAX_SEEKERS, "5") if seekers else DEFAULT_SEEKERS
    return size_bytes // MIB, chunk, seeks, seekers


def parse_files_spec(spec):
    """-n NUM[:MAX[:MIN[:DIRS[:CHUNK]]]] -> (NUM in 1024s, max, min, dirs, chunk)."""
    num, max_size, min_size, dirs, chunk = _split(spec, "-n", 5)
    if not num.strip().isdigit():
        raise UsageError(
            f"{NAME}: -n '{num}': the number of files is counted in multiples of 1024 "
            "(-n 1 = 1024 files) and must be a whole number"
        )
    if max_size.strip() in ("-1", "-2"):
        raise UsageError(
            f"{NAME}: -n max size {max_size} asks for bonnie++'s link tests, which this model does not have"
        )
    max_size = _amount(max_size, "-n max size", "100000 or 64k") if max_size else 0
    min_size = _amount(min_size, "-n min size", "0 or 4k") if min_size else 0
    if min_size > max_size:
        raise UsageError(f"{NAME}: -n min size {min_size} is larger than the max size {max_size}")
    dirs = _count(dirs, "the number of directories", 1, MAX_DIRS, "16") if dirs else 1
    chunk = _power_of_two_chunk(chunk, "the -n chunk size") if chunk else DEFAULT_CHUNK
    return int(num), max_size, min_size, dirs, chunk


def _ram_mib(text):
    if text is None:
        return 0
    if not text.strip().isdigit():
        raise UsageError(f"{NAME}: -r '{text}' is not a RAM size in MiB (e.g. -r 1024)")
    return int(text)


def _default_size(ram_mib):
    """bonnie++'s rule when -r is given without -s: twice RAM, rounded up to a GiB past half of one."""
    size = max(DEFAULT_SIZE_MIB, 2 * ram_mib)
    return size + 1024 - size % 1024 if size % 1024 > 512 else size


def _char_mib(fast, size_mib):
    if fast is None:
        return size_mib
    if not fast.strip().isdigit():
        raise UsageError(f"{NAME}: -f '{fast}' is not a size in MiB for the per-char tests (-f alone skips them)")
    return min(int(fast), size_mib)  # bonnie++ caps it at the file size


def _seed(text):
    if text is None:
        return random.randrange(1 << 32)
    if not text.strip().isdigit():
        raise UsageError(f"{NAME}: -z '{text}' is not a seed (a whole number)")
    return int(text)


def _check_sizes(plan, size_given):
    if plan.size_mib == 0 and plan.files_k == 0:
        raise UsageError(f"{NAME}: -s 0 skips the IO tests and -n 0 the file tests: there is nothing to run")
    if plan.size_mib and plan.size_mib * MIB // plan.chunk < plan.seekers:
        raise UsageError(
            f"{NAME}: a {plan.size_mib} MiB file holds {plan.size_mib * MIB // plan.chunk} "
            f"chunks of {plan.chunk} bytes, too few for the seeks of {plan.seekers} seeker processes"
        )
    if plan.ram_mib and plan.size_mib and plan.size_mib < 2 * plan.ram_mib:
        how = "-s" if size_given else "the default size"
        raise UsageError(
            f"{NAME}: {how} {plan.size_mib} MiB is less than twice the RAM given by -r "
            f"({plan.ram_mib} MiB); bonnie++ needs the file at least double RAM"
        )
    if plan.ram_mib and plan.files_k * MAX_DATA_PER_FILE * 2 > plan.ram_mib << 10:
        raise UsageError(
            f"{NAME}: {plan.files} file names would take more than half of {plan.ram_mib} MiB "
            "of RAM (bonnie++'s limit); use a smaller -n"
        )


def plan_of(args):
    ram = _ram_mib(args.ram)
    size_mib, chunk, seeks, seekers = (
        parse_size_spec(args.size)
        if args.size
        else (_default_size(ram) if ram else DEFAULT_SIZE_MIB, DEFAULT_CHUNK, DEFAULT_SEEKS, DEFAULT_SEEKERS)
    )
    files_k, max_size, min_size, dirs, file_chunk = parse_files_spec(args.files)
    plan = Plan(
        size_mib=size_mib,
        chunk=chunk,
        seeks=seeks,
        seekers=seekers,
        char_mib=_char_mib(args.fast, size_mib),
        files_k=files_k,
        max_size=max_size,
        min_size=min_size,
        dirs=dirs,
        file_chunk=file_chunk,
        sync=args.no_buffering,
        drop_caches=not args.no_drop_caches,
        machine=args.machine or os.uname().nodename,
        seed=_seed(args.seed),
        ram_mib=ram,
    )
    _check_sizes(plan, args.size is not None)
    if "," in plan.machine:
        raise UsageError(f"{NAME}: -m '{plan.machine}' has a comma, which would break the CSV line")
    return plan


def check(args):
    plan_of(args)


# ---------------------------------------------------------------------------------------------------
# Running the engine


def _check_space(plan):
    st = os.statvfs(".")
    free = st.f_bavail * st.f_frsize
    need = plan.size_mib * MIB + plan.files * plan.max_size
    if need > free:
        raise WorkloadError(
            f"{NAME}: the test needs {need / MIB:.0f} MiB but this filesystem has "
            f"{free / MIB:.0f} MiB free; use a smaller -s or -n"
        )
    inodes = plan.files + plan.dirs + 1  # each file, its directories, the test's own directory
    if st.f_files and inodes > st.f_favail:  # f_files 0: the filesystem has no inode limit
        dirs = f"{plan.dirs} director{'y' if plan.dirs == 1 else 'ies'}"
        raise WorkloadError(
            f"{NAME}: {plan.files:,} files in {dirs} need {inodes:,} inodes but this "
            f"filesystem has {st.f_favail:,} free (df -i: {st.f_files - st.f_ffree:,} of "
            f"{st.f_files:,} used); use a smaller -n"
        )


def _run_engine(plan):
    """Runs the engine in the current directory; returns its JSON. Its stderr carries progress
    lines ("progress: ...") and, on failure, one sentence."""
    progress = Progress(NAME)
    proc = subprocess.Popen(
        [engine_path("bonnie"), *plan.engine_args()], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    errors = []
    try:
        for line in proc.stderr:
            if line.startswith("progress: "):
                progress.update(line[len("progress: ") :].strip())
            elif line.strip():
                errors.append(line.strip())
        out = proc.stdout.read()
        status = proc.wait()
    except KeyboardInterrupt:
        proc.wait()  # the engine got the Ctrl-C too, and removes its files
        raise WorkloadError(f"{NAME}: interrupted") from None
    finally:
        progress.done()
    if status != 0:
        raise WorkloadError(f"{NAME}: {errors[-1] if errors else f'the engine exited with status {status}'}")
    return json.loads(out)


def _figures(name, raw, plan):
    """A test's result: the engine's raw figures plus what bonnie++ reports from them."""
    elapsed = raw["elapsed_s"]
    fig = dict(raw)
    fig["cpu_pct"] = int(raw["cpu_s"] / elapsed * 100.0) if elapsed > 0 else 0
    fig["shown"] = elapsed >= MIN_TIME
    mib = {
        "putc": plan.char_mib,
        "getc": plan.char_mib,
        "write": plan.size_mib,
        "rewrite": plan.size_mib,
        "read": plan.size_mib,
    }.get(name)
    if mib is not None:  # a sequential test: K/sec; the seeks and file tests: operations/sec
        fig["bytes"] = mib * MIB
        fig["kib_per_s"] = fig["bytes"] / 1024 / elapsed if elapsed > 0 else None
    else:
        fig["per_s"] = raw["ops"] / elapsed if elapsed > 0 else None
    return fig


def caches_note(plan):
    if not plan.drop_caches:
        return "caches: kept between tests (--no-drop-caches); reads may come from the page cache"
    loop = buffered_loop_under(".")
    if loop:
        return (
            f"{DROP_NOTE}; but {loop} is a loop device over a buffered image file, whose pages the host "
            "keeps: reads may still come from host memory"
        )
    return DROP_NOTE


def build_result(plan, raw):
    tests = {name: _figures(name, fig, plan) for name, fig in raw["tests"].items()}
    if "seeks" in tests:
        tests["seeks"]["updates"] = raw["seek_updates"]
    result = {
        "workload": NAME,
        "params": dataclasses.asdict(plan) | {"files": plan.files},
        "phases": raw["phases"],
        "caches": caches_note(plan),
        "stdio_buffer": raw["stdio_buffer"],
        "tests": tests,
        "elapsed_ns": int(raw["elapsed_s"] * 1e9),
    }
    result["csv"] = csv_line(result)
    return result


def main(args):
    plan = plan_of(args)
    _check_space(plan)
    result = build_result(plan, _run_engine(plan))
    write_result(args.result, result)
    if not args.result:
        print(render(result))


# ---------------------------------------------------------------------------------------------------
# bonnie++'s text table and CSV line (bon_time.cpp of 2.00a, its quirks kept where the CSV fields
# depend on them: the IO chunk size and the file chunk size are never printed in the CSV)


def _size_text(value, units):
    """bonnie++'s print_size: 256 -> '256M', 1024 -> '1G' with units 'MG'; 4096 -> '4k' with ' km'."""
    index = 0
    while value and value % 1024 == 0 and index + 1 < len(units):
        value //= 1024
        index += 1
    return f"{value}{units[index]}".rstrip()


def _rate(test, fig, csv):
    """The work/second field: blank if not run, +++++ under 0.5 s, else as bonnie++ prints it."""
    if fig is None:
        return "" if csv else " " * 6
    if not fig["shown"]:
        return "+++++" if csv else " +++++"
    if test == "seeks":
        stat = fig["per_s"]
        return (
            (f"{stat:.0f}" if stat >= 1000 else f"{stat:.1f}")
            if csv
            else (f" {stat:5.0f}" if stat >= 1000 else f" {stat:5.1f}")
        )
    stat = fig.get("kib_per_s", fig.get("per_s"))
    if csv:
        return str(int(stat))
    if "kib_per_s" not in fig:
        return f" {int(stat):5d}"
    if stat < 10000:
        return f" {int(stat):4d}k"
    if stat / 1024 < 1000:
        mib = stat / 1024
        return f" {mib:4.1f}m" if mib < 100 else f" {int(mib + 0.5):4d}m"
    return f" {stat / 1024 / 1024:4.1f}g"


def _cpu(fig, csv):
    if fig is None:
        return "" if csv else " " * 4
    if not fig["shown"]:
        return "+++" if csv else " +++"
    return str(fig["cpu_pct"]) if csv else f" {fig['cpu_pct']:3d}"


def _latency(fig):
    lat = fig["latency_s"] if fig else 0.0
    if lat == 0.0:
        return ""
    if lat > 99.999999:
        return f"{int(lat)}s"
    if lat > 0.099999:
        return f"{int(lat * 1000)}ms"
    return f"{int(lat * 1e6)}us"


def _io_label(params):
    """Name:Size etc: size, then chunk, concurrency, seeks and seekers where not the default."""
    fields = [
        _size_text(params["size_mib"], "MG"),
        _size_text(params["chunk"], " km") if params["chunk"] != DEFAULT_CHUNK else "",
        "",
        str(params["seeks"]) if params["seeks"] != DEFAULT_SEEKS else "",
        str(params["seekers"]) if params["seekers"] != DEFAULT_SEEKERS else "",
    ]
    return ":".join(fields).rstrip(":")


def _io_text(result):
    p, tests = result["params"], result["tests"]
    label = _io_label(p)
    name = (p["machine"] + " " * 18)[:18]
    offset = 18 - len(label)  # bonnie++ right-aligns the label over the name, one space between
    head = name[:offset] + " " + label if offset >= 0 else label
    rows = [
        "fsprof bonnie       ------Sequential Output------ --Sequential Input- --Random-",
        "                    -Per Chr- --Block-- -Rewrite- -Per Chr- --Block-- --Seeks--",
        "Name:Size etc        /sec %CP  /sec %CP  /sec %CP  /sec %CP  /sec %CP  /sec %CP",
        head + "".join(_rate(t, tests.get(t), False) + _cpu(tests.get(t), False) for t in IO_TESTS),
        "Latency          " + "".join(f" {_latency(tests.get(t)):>9}" for t in IO_TESTS),
    ]
    return rows


def _files_label(params, csv):
    label = str(params["files_k"])
    if csv:
        sizes = f",{params['max_size']},{params['min_size'] or ''}" if params["max_size"] else ",,"
        return label + sizes + "," + (f",{params['dirs']}" if params["dirs"] > 1 else ",")
    if params["max_size"]:
        label += f":{params['max_size']}:{params['min_size']}"
    return label + (f"/{params['dirs']}" if params["dirs"] > 1 else "")


def _files_text(result):
    p, tests = result["params"], result["tests"]
    kind = (
        "files:max:min       " if p["min_size"] else "files:max           " if p["max_size"] else "              files "
    )
    return [
        "fsprof bonnie       ------Sequential Create------ --------Random Create--------",
        f"{p['machine']:<19.19} -Create-- --Read--- -Delete-- -Create-- --Read--- -Delete--",
        kind + " /sec %CP  /sec %CP  /sec %CP  /sec %CP  /sec %CP  /sec %CP",
        f"{_files_label(p, False):>19}"
        + "".join(_rate(t, tests.get(t), False) + _cpu(tests.get(t), False) for t in FILE_TESTS),
        "Latency          " + "".join(f" {_latency(tests.get(t)):>9}" for t in FILE_TESTS),
    ]


def csv_line(result):
    """The bonnie++ 1.98-2.00a CSV line: 50 fields, the order of bon_csv2txt and bon_csv2html."""
    p, tests = result["params"], result["tests"]
    fields = [CSV_VERSION, VERSION, p["machine"], "1", str(p["seed"])]
    if p["size_mib"]:
        fields += [_size_text(p["size_mib"], "MG"), "", str(p["seeks"]), str(p["seekers"])]
        for t in IO_TESTS:
            fields += [_rate(t, tests.get(t), True), _cpu(tests.get(t), True)]
    else:
        fields += [""] * 16
    if p["files_k"]:
        fields += _files_label(p, True).split(",")
        for t in FILE_TESTS:
            fields += [_rate(t, tests.get(t), True), _cpu(tests.get(t), True)]
    else:
        fields += [""] * 17
    fields += [_latency(tests.get(t)) for t in IO_TESTS + FILE_TESTS]
    return ",".join(fields)


def _hidden_note(result):
    """bonnie++ hides figures of tests under 0.5 s; the exact ones are worth a line here."""
    hidden = []
    for name, fig in result["tests"].items():
        if fig["shown"]:
            continue
        if "kib_per_s" in fig:
            hidden.append(f"{name} {fig['kib_per_s'] / 1024:.0f} MiB/s")
        else:
            hidden.append(f"{name} {fig['per_s']:.0f}/s")
    if not hidden:
        return []
    return ["+++++: under 0.5 s, hidden as bonnie++ does; measured: " + ", ".join(hidden)]


def render(result):
    lines = []
    if result["params"]["size_mib"]:
        lines += _io_text(result)
    if result["params"]["files_k"]:
        lines += _files_text(result)
    lines += [result["csv"]] + _hidden_note(result) + [result["caches"]]
    if "seeks" in result["tests"]:
        seeks = result["tests"]["seeks"]
        lines.append(
            f"seeks: {seeks['ops']} by {result['params']['seekers']} processes, "
            f"{seeks['updates']} of them rewriting their block"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(run_main(__import__(__name__)))
