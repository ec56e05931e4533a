"""The wheel carries what fsprof needs at run time beside its Python code: `make build` compiles
the BPF objects (with the vmlinux.h they were compiled against) and the workload engines, and
they are copied into the packages as data, where profiler/trace/bpf.py and workloads/common.py look
first. Metadata and the package list are in setup.cfg."""

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent


class BuildPyWithObjects(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the tree's build/, which `make build` fills
        subprocess.run(["make", "--no-print-directory", "-C", str(HERE), "build"], check=True)
        build = HERE / "build"
        objects = Path(self.build_lib, "profiler", "trace", "bpf_objects")
        _copy([*sorted(build.glob("*.bpf.o")), build / "vmlinux.h"], objects)
        _copy(sorted((build / "legacy").glob("*.bpf.o")), objects / "legacy")  # kernels before 5.11
        _copy(sorted(p for p in (build / "workloads").iterdir() if p.is_file()),
              Path(self.build_lib, "workloads", "engines"))


def _copy(files, into):
    into.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(f, into / f.name)


class PlatformDistribution(Distribution):
    """The wheel holds ELF objects and x86_64 syscall numbers: it is for one platform, not pure."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithObjects}, distclass=PlatformDistribution)
