"""Bundled workloads, the user's own command, and the gated launch that lets tracing see a
workload's first syscall."""

import ctypes
import importlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from ..errors import FsprofError
from ..units import parse_size
from .scratch import DEFAULT_IMAGE
from workloads.common import UsageError

if TYPE_CHECKING:
    from types import ModuleType

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1

# `fsprof run --workload NAME` -> the module in workloads/ (its interface: workloads/common.py).
WORKLOADS = {
    "fsync-loop": "workloads.fsync_loop",
    "fsync-heavy": "workloads.fsync_heavy",
    "bonnie": "workloads.bonnie",
    "untar": "workloads.untar",
}
COMMAND = "command"  # the workload name recorded for `fsprof run ... -- CMD ARGS`
# A command's phases: `fsprof phase NAME` appends NAME to the file this variable names (one per
# line: line i is phase i) and marks it; the run reads the names back (profiler/commands/phase.py).
PHASE_FILE_ENV = "FSPROF_PHASE_FILE"
PHASE_FILE = "phases.txt"


def module(name: str) -> "ModuleType":
    if name not in WORKLOADS:
        raise FsprofError(f"unknown workload '{name}'; fsprof has: {', '.join(sorted(WORKLOADS))}")
    return importlib.import_module(WORKLOADS[name])


def check_args(name: str, args: Iterable[str]) -> None:
    """Parses and checks a bundled workload's own options before anything is provisioned: a bad
    parameter is one sentence (exit 2), as any other usage error."""
    mod = module(name)
    try:
        mod.check(mod.parser().parse_args(list(args)))
    except UsageError as e:
        raise FsprofError(str(e), exit_code=2)


def image_size(name: str) -> int:
    """A bundled workload's scratch image size (its IMAGE_SIZE), else scratch.DEFAULT_IMAGE."""
    own = getattr(module(name), "IMAGE_SIZE", None) if name in WORKLOADS else None
    return parse_size(own) if own else DEFAULT_IMAGE


def workload_argv(name: str, args: Iterable[str], result_file: str) -> list[str]:
    module(name)
    return [sys.executable, "-m", WORKLOADS[name], "--result", result_file, *args]


class WorkloadSpec:
    """What `fsprof run` runs on each filesystem: a bundled workload with its own options, or the
    user's own command (`-- CMD ARGS`, with `{mnt}` replaced by the mount point under test)."""

    def __init__(self, name, args=(), command=None):
        self.name, self.args, self.command = name, list(args), list(command or [])
        # Phase 0 is what runs before the first marker: a bundled workload's interpreter start-up,
        # or all of a command that marks nothing.
        self.phase0 = "run" if command else "startup"

    @classmethod
    def checked(cls, name: str, args: Sequence[str] = (), command: Sequence[str] = ()) -> Self:
        """The bundled workload `name` with its own options `args` (checked by it now), or the
        user's `command` when given (then `args` must be empty)."""
        if command:
            if args:
                raise FsprofError(
                    f"options {' '.join(args)} are not fsprof's; "
                    "with `-- CMD`, put the command's own options after `--`",
                    exit_code=2,
                )
            return cls(COMMAND, command=command)
        check_args(name, args)
        return cls(name, args)

    def argv(self, result_file: str, mountpoint: str) -> list[str]:
        if self.command:
            return [part.replace("{mnt}", str(mountpoint)) for part in self.command]
        return workload_argv(self.name, self.args, result_file)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "args": self.args} if not self.command else {"name": COMMAND, "argv": self.command}

    def env(self, run_dir: str | Path) -> dict[str, str]:
        """The environment the workload runs in. A command gets FSPROF_PHASE_FILE, where `fsprof
        phase NAME` (profiler/commands/phase.py) numbers the phases it marks, and finds `fsprof`
        on its PATH (this interpreter's directory: the venv's or the installed script's)."""
        env = dict(os.environ)
        if self.command:
            env[PHASE_FILE_ENV] = str(Path(run_dir) / PHASE_FILE)
            here = os.path.dirname(sys.executable)
            if os.path.exists(os.path.join(here, "fsprof")):
                env["PATH"] = here + os.pathsep + env.get("PATH", "")
        return env

    def own_result(self, result_file: str | Path, status: int, run_dir: str | Path | None = None) -> dict[str, Any]:
        """The workload's own figures; its failure as one sentence. A command's phases are the
        names `fsprof phase` wrote, in their numbers' order."""
        if self.command:
            if status != 0:
                raise FsprofError(f"the command `{' '.join(self.command)}` exited with status {status}")
            own = {"command": self.command, "exit_status": status}
            marked = Path(run_dir) / PHASE_FILE if run_dir else None
            if marked and marked.exists():
                own["phases"] = marked.read_text().splitlines()
                marked.unlink()
            return own
        try:
            own = json.loads(Path(result_file).read_text())
        except (OSError, ValueError):
            own = {}
        if "error" in own:
            raise FsprofError(own["error"])
        if status != 0:
            raise FsprofError(f"the {self.name} workload exited with status {status}")
        if getattr(module(self.name), "UNIT", None):  # compare's counts go per unit of work
            own.setdefault("unit", module(self.name).UNIT)
        return own


def render(name: str, result: dict[str, Any] | None) -> str:
    """The workload's own terminal text for its result (tables as its reference tool prints)."""
    if name not in WORKLOADS or not result or "error" in result:
        return ""
    mod = module(name)
    return mod.render(result) if hasattr(mod, "render") else ""


def parse_result_line(line: str) -> dict[str, int | float | str]:
    """{key: number or text} of a workload's `RESULT key=value [key=value ...]` line ({} for any
    other line): the figures a workload reports about itself (docs/compare.md, units of work)."""
    words = line.split()
    if not words or words[0] != "RESULT":
        return {}
    out: dict[str, int | float | str] = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if sep and key:
            try:
                out[key] = int(value)
            except ValueError:
                try:
                    out[key] = float(value)
                except ValueError:
                    out[key] = value
    return out


class GatedProcess:
    """Forks a child that waits at a gate before exec, so its pid can join the BPF pid filter
    before it runs a single syscall of the workload. The child leads its own process group so
    that a Ctrl-C meant for fsprof reaches fsprof, which then stops the workload itself."""

    def __init__(self, argv, cwd, env=None, read_results=False):
        """read_results: the child's stdout goes through a pipe that fsprof copies to its own
        stdout, keeping the workload's `RESULT key=value` lines (its own figures) in `reported`."""
        self.argv = argv
        self.reported, self.rusage, self._tee = {}, None, None
        gate_r, gate_w = os.pipe()
        out_r, out_w = os.pipe() if read_results else (None, None)
        pkg_root = str(Path(__file__).resolve().parents[2])  # holds profiler/ and workloads/
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
        pid = os.fork()
        if pid == 0:  # child: only async-signal-safe work until exec
            try:
                os.close(gate_w)
                if out_w is not None:
                    os.dup2(out_w, 1)
                    os.close(out_w)
                    os.close(out_r)
                os.setpgid(0, 0)
                # Die with fsprof: a SIGKILLed fsprof must not leave its workload on the mount.
                _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                if os.read(gate_r, 1) != b"g":
                    os._exit(125)
                os.chdir(cwd)
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        os.close(gate_r)
        if out_r is not None:
            os.close(out_w)
            self._tee = threading.Thread(target=self._copy_output, args=(out_r,), daemon=True)
            self._tee.start()
        try:
            os.setpgid(pid, pid)  # also from here, so killpg works whichever side runs first
        except OSError:
            pass
        self.pid, self._gate, self.returncode = pid, gate_w, None
        self.started = None

    def release(self) -> None:
        self.started = time.monotonic()
        os.write(self._gate, b"g")
        os.close(self._gate)

    def _copy_output(self, fd):
        with os.fdopen(fd, "rb") as out:
            for line in out:
                self.reported.update(parse_result_line(line.decode(errors="replace")))
                try:
                    sys.stdout.buffer.write(line)
                    sys.stdout.buffer.flush()
                except (OSError, ValueError):
                    pass  # our stdout is gone (a closed pipe): keep reading, or the workload would block

    def wait(self) -> int:
        # wait4: the rusage of the workload and of every descendant it waited for.
        _, status, self.rusage = os.wait4(self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        if self._tee is not None:
            self._tee.join(timeout=5)  # a daemon it left may hold the pipe open: not waited for
        return self.returncode

    def cpu(self) -> dict[str, float] | None:
        """The workload's CPU time (its process tree's, reaped), from wait4's rusage."""
        return {"user_s": self.rusage.ru_utime, "system_s": self.rusage.ru_stime} if self.rusage else None

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.wait()
