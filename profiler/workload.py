"""Bundled workloads and the gated launch that lets tracing see a workload's first syscall."""

import ctypes
import os
import signal
import sys
import time

from .errors import FsprofError

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1

# name -> (python module in workloads/, default parameters)
WORKLOADS = {
    "fsync-loop": ("workloads.fsync_loop", {"count": 1000, "size": 4096}),
}


def workload_argv(name, params, result_file):
    if name not in WORKLOADS:
        raise FsprofError(f"unknown workload '{name}'; fsprof has: {', '.join(sorted(WORKLOADS))}")
    module, defaults = WORKLOADS[name]
    argv = [sys.executable, "-m", module, "--result", result_file]
    for key, value in {**defaults, **params}.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


class GatedProcess:
    """Forks a child that waits at a gate before exec, so its pid can join the BPF pid filter
    before it runs a single syscall of the workload. The child leads its own process group so
    that a Ctrl-C meant for fsprof reaches fsprof, which then stops the workload itself."""

    def __init__(self, argv, cwd, env=None):
        self.argv = argv
        gate_r, gate_w = os.pipe()
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
        pid = os.fork()
        if pid == 0:  # child: only async-signal-safe work until exec
            try:
                os.close(gate_w)
                os.setpgid(0, 0)
                # Die with fsprof: a SIGKILLed fsprof must not leave its workload on the mount.
                _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                if os.read(gate_r, 1) != b"g":
                    os._exit(125)
                os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        os.close(gate_r)
        try:
            os.setpgid(pid, pid)  # also from here, so killpg works whichever side runs first
        except OSError:
            pass
        self.pid, self._gate, self.returncode = pid, gate_w, None
        self.started = None

    def release(self):
        self.started = time.monotonic()
        os.write(self._gate, b"g")
        os.close(self._gate)

    def wait(self):
        _, status = os.waitpid(self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self):
        if self.returncode is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.wait()
