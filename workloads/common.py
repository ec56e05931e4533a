"""What every bundled workload shares: its command-line conventions, phase markers, the result
file, and the progress line.

A workload is a module in this package with:
  NAME                 the name users pass to `fsprof run --workload`
  parser()             a WorkloadParser with the workload's own options (fsprof adds --result)
  check(args)          raise UsageError(sentence) for bad parameters; called by fsprof before it
                       provisions anything, and again by main()
  main(argv)           runs in the current directory (on the filesystem under test), marks its
                       phases with Phases, and writes its result with write_result()
  render(result)       the terminal text for its result (tables laid out as the reference tool's)

A failure the user can fix (ENOSPC, no inodes left, a missing tool) is written to the result file
as {"error": sentence} by run_main(), and fsprof prints that sentence.
"""

import argparse
import ctypes
import json
import os
import sys
import time

# profiler/ is always beside workloads/: one wheel (setup.cfg packages), one PYTHONPATH (GatedProcess).
from profiler import units

# prctl(PHASE_MAGIC, index, 0, 0, 0) is the phase marker: an option number no kernel defines (it
# returns EINVAL and changes nothing), which fsprof's sys_enter probe recognises from a traced
# process and turns into the current phase. The same constant is in bpf/fsprof.h and phase.h.
PHASE_MAGIC = 0x66737072  # "fspr"
MAX_PHASES = 32  # phase 0 is "startup": everything before the first marker

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class UsageError(Exception):
    """A parameter the user got wrong: one sentence, exit status 2."""


class WorkloadError(Exception):
    """The workload could not do its job on this filesystem (ENOSPC, inodes, a missing tool)."""


class WorkloadParser(argparse.ArgumentParser):
    def __init__(self, prog, **kw):
        super().__init__(prog=prog, **kw)
        self.add_argument("--result", help="write the JSON result here (fsprof sets it)")

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


class Phases:
    """Marks phase boundaries for the tracer, and times each phase for the workload's own result.
    Phase i (1-based) is names[i-1]; everything traced before the first enter() is phase 0."""

    def __init__(self, names):
        if len(names) >= MAX_PHASES:
            raise ValueError(f"at most {MAX_PHASES - 1} phases")
        self.names = list(names)
        self.elapsed = {}
        self._current, self._since = None, None

    def enter(self, name):
        now = time.monotonic()
        self._close(now)
        mark_phase(self.names.index(name) + 1)
        self._current, self._since = name, now

    def end(self):
        self._close(time.monotonic())
        self._current = None

    def _close(self, now):
        if self._current is not None:
            self.elapsed[self._current] = self.elapsed.get(self._current, 0.0) + now - self._since


def mark_phase(index):
    _libc.prctl(PHASE_MAGIC, index, 0, 0, 0)


def parse_size(text):
    """'16k', '1G', '512M', '4096' -> bytes (binary multiples, as bonnie++ and sysbench use), 0
    included; an argparse type: argparse prints an ArgumentTypeError's sentence, not a ValueError's."""
    try:
        return units.parse_size(text, zero_ok=True, examples="16K, 1G")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def write_result(path, result):
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


class Progress:
    """A one-line progress display on stderr, shown only on a terminal and only once a run has
    lasted more than `after` seconds, so short runs and captured output stay clean."""

    def __init__(self, label, after=2.0):
        self.label, self.after = label, after
        self.start = time.monotonic()
        self.shown = False
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def update(self, text):
        now = time.monotonic()
        if not self.tty or now - self.start < self.after or now - self._last < 0.2:
            return
        self._last, self.shown = now, True
        sys.stderr.write(f"\r\033[K{self.label}: {text}")
        sys.stderr.flush()

    def done(self):
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def run_main(module, argv=None):
    """The __main__ of a workload: parse, check, run; a failure becomes one sentence in the
    result file and on stderr, with exit status 2 (usage) or 1 (the filesystem said no)."""
    argv = sys.argv[1:] if argv is None else argv
    result_path = None
    try:
        args = module.parser().parse_args(argv)
        result_path = args.result
        module.check(args)
        module.main(args)
        return 0
    except UsageError as e:
        return _fail(result_path, str(e), 2)
    except (WorkloadError, OSError) as e:
        text = (
            str(e)
            if isinstance(e, WorkloadError)
            else f"{module.NAME}: {e.strerror or e}" + (f": {e.filename}" if getattr(e, "filename", None) else "")
        )
        return _fail(result_path, text, 1)


def _fail(result_path, sentence, code):
    """fsprof prints the sentence from the result file; standalone, it goes to stderr."""
    if result_path:
        write_result(result_path, {"error": sentence})
    else:
        print(sentence, file=sys.stderr)
    return code


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def engine_path(name):
    """The C engine `make build` compiles from workloads/<name>.c: shipped in workloads/engines/ by
    an installed wheel (setup.py), else in the source tree's build/workloads/."""
    shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engines", name)
    path = shipped if os.path.exists(shipped) else os.path.join(REPO, "build", "workloads", name)
    if not os.access(path, os.X_OK):
        raise WorkloadError(f"the workload engine {path} is missing; run `make build`")
    return path


def buffered_loop_under(path="."):
    """The loop device ('loop0') holding the filesystem at `path` when it reaches its image file
    through the host's page cache (not direct I/O), else None. There drop_caches cannot make reads
    cold: the image's dirty pages stay in host memory (docs/test-bed.md)."""
    from profiler.machine import blockdev  # fsprof's own reading of sysfs, loaded only here

    try:
        name = blockdev.block_dev_of_file(path)
    except OSError:
        return None
    below = blockdev.backing_of(name) if name else None
    return name if below and not below["direct_io"] else None
