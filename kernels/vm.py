"""Boot a kernel in a qemu VM (virtme-ng) with this machine's root shared read-only, and run one
command there as root:

    python -m kernels.vm --kernel 6.1 -- .venv/bin/python -m profiler doctor
    python -m kernels.vm --kernel 6.12 --disk-model hdd -- .venv/bin/python -m profiler run \\
        --device /dev/disk/by-id/virtio-fsprof-hdd --erase-device --fs ext4 --workload fsync-loop

In the guest, before the command: tracefs and debugfs are mounted, loop, ext4, xfs and btrfs are
loaded (Debian builds them as modules), a fresh ext4 on an extra sparse disk is mounted at
/var/tmp/fsprof (fsprof's state and scratch images; TMPDIR points into it), and the current
directory is an overlay: the command may write there, but what it writes stays in the guest. Give
`--rwdir DIR` for results that must come back. Exit status: the command's own; 2 bad input; 77
this machine cannot run the VM; 124 the command timed out; 125 the VM did not boot or stopped
before the command ended. Nothing is left behind on the host: the qemu process group is killed and
the disk images removed on exit, Ctrl-C, SIGTERM and timeouts. Details: docs/kernels.md.

Over 500 lines: the guest's set-up script, the qemu command line and the undo of both are one
boot, each part written against the others."""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# virtme-ng: the project's own venv first (make test-kernels installs it there), then others.
VNG_CANDIDATES = [REPO / ".venv-vm" / "bin" / "vng", Path("/opt/vng/bin/vng")]
QEMU = "qemu-system-x86_64"
LOG_ROOT = Path("/var/tmp/fsprof-kernels")  # logs and the KVM probe's verdicts (host side)

# Exit statuses of our own (anything else is the guest command's).
USAGE, CANNOT_RUN, TIMED_OUT, NO_BOOT = 2, 77, 124, 125

# Emulated devices (issue 16 item 6): qemu -drive options per model, the serial the guest sees
# (/dev/disk/by-id/virtio-<serial>; virtio-blk keeps at most 20 characters), and what it is.
DISK_MODELS = {
    "hdd": (
        "cache=none,aio=threads,throttling.iops-total=150,throttling.bps-total=157286400",
        "fsprof-hdd",
        "150 IOPS and 150 MiB/s in total (qemu throttling), write-back cache honouring flushes",
    ),
    "volatile-cache": (
        "cache=writeback",
        "fsprof-volcache",
        "write-back cache: writes land in the host page cache, a flush fsyncs the host file",
    ),
    "write-through": (
        "cache=writethrough",
        "fsprof-wthrough",
        "no volatile cache: each write is flushed to the host file before it completes",
    ),
    "fast": ("cache=unsafe", "fsprof-fast", "host page cache, flushes ignored (like fsprof's loop images)"),
    # The guest puts dm-delay over this disk: /dev/mapper/fsprof-delay (--delay-ms per I/O).
    "delay": (
        "cache=writeback",
        "fsprof-delay",
        "/dev/mapper/fsprof-delay: dm-delay adds --delay-ms to each read, write and flush of a volatile-cache disk",
    ),
}
STATE_SERIAL = "fsprof-state"
# Directories virtme's init mounts a fresh tmpfs over in the guest: the host's files there are unseen.
GUEST_TMPFS = (Path("/tmp"), Path("/var/tmp"))


class VMError(Exception):
    """One sentence for the user, and the exit status it means."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


@dataclass
class Outcome:
    status: str  # "done", "timeout", "no-boot", "stopped"
    rc: int  # the command's exit status, or one of ours
    boot_s: float  # seconds until the guest ran our script (0 if it never did)
    seconds: float  # whole wall time
    message: str = ""


# ---- what to boot, and how ----


def installed_kernels():
    """{release: /boot/vmlinuz-release} of the images installed in /boot."""
    return {p.name[len("vmlinuz-") :]: p for p in Path("/boot").glob("vmlinuz-*") if p.is_file()}


def release_key(release):
    return [int(x) for x in re.findall(r"\d+", release)]


def resolve_kernel(spec):
    """A kernel image path, a version prefix of an installed Debian image ("6.1", "6.12"), or "rt"."""
    if "/" in spec or Path(spec).exists():
        path = Path(spec)
        if not path.is_file():
            raise VMError(f"no kernel image at {spec}", USAGE)
        try:
            with open(path, "rb") as f:
                f.seek(0x202)
                magic = f.read(4)
        except OSError as e:
            raise VMError(f"cannot read the kernel image {spec}: {e.strerror}", USAGE)
        if magic != b"HdrS":  # every bootable x86 bzImage carries its setup header here
            raise VMError(f"{spec} is not a bootable x86 kernel image (no bzImage header)", USAGE)
        return path.resolve()
    # "rt" is Debian's PREEMPT_RT build (6.1.0-N-rt-amd64); a version prefix never picks one.
    rt = spec == "rt"
    found = {
        r: p
        for r, p in installed_kernels().items()
        if ("-rt-" in r) == rt and (rt or re.match(re.escape(spec) + r"([.-]|$)", r))
    }
    if not found:
        have = ", ".join(sorted(installed_kernels(), key=release_key)) or "none"
        if rt:
            raise VMError(
                f"no PREEMPT_RT kernel is installed in /boot (installed: {have}): "
                "`make vm-deps` installs linux-image-rt-amd64",
                USAGE,
            )
        raise VMError(
            f"no kernel {spec} is installed in /boot (installed: {have}); give an image path or install its package",
            USAGE,
        )
    return found[max(found, key=release_key)]


def find_vng():
    for candidate in VNG_CANDIDATES:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    which = shutil.which("vng")
    if which:
        return Path(which)
    raise VMError("virtme-ng (vng) is not installed: `make test-kernels` installs it into .venv-vm", CANNOT_RUN)


def check_qemu():
    if not shutil.which(QEMU):
        raise VMError(f"{QEMU} is not installed (Debian package qemu-system-x86): cannot boot a VM here", CANNOT_RUN)
    try:
        subprocess.run([QEMU, "--version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise VMError(f"{QEMU} cannot run here ({e}): cannot boot a VM", CANNOT_RUN)


def kvm_usable(kvm_dev):
    """None if kvm_dev opens read-write, else why not."""
    try:
        os.close(os.open(kvm_dev, os.O_RDWR))
        return None
    except OSError as e:
        return f"{kvm_dev}: {e.strerror}"


def require_kvm(kvm_dev):
    missing = kvm_usable(kvm_dev)
    if missing:
        raise VMError(f"KVM is not available ({missing}): use --accel tcg or auto", CANNOT_RUN)


def boot_id():
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


KVM_PROBE_S = 45  # a kernel that boots under KVM reaches its init in a few seconds


def choose_accel(kernel, accel, kvm_dev, say):
    """("kvm" | "tcg", one sentence saying why). auto: KVM only if it boots this kernel, which a
    short probe boot tells (nested KVM here opens /dev/kvm but hangs a stock kernel early); the
    verdict is kept per host boot and kernel, so the probe costs its time once."""
    if accel == "tcg":
        return "tcg", "running under TCG (asked for)"
    missing = kvm_usable(kvm_dev)
    if accel == "kvm":
        require_kvm(kvm_dev)
        return "kvm", "running under KVM (asked for)"
    if missing:
        return "tcg", f"no usable KVM ({missing}): running under TCG (emulation, slow)"
    cache = LOG_ROOT / "kvm-probe.json"
    try:
        verdicts = json.loads(cache.read_text())
    except (OSError, ValueError):
        verdicts = {}
    key = f"{boot_id()} {kernel}"
    if key not in verdicts:
        say(f"vm: probing whether KVM boots {kernel.name} (at most {KVM_PROBE_S} s, once per host boot)")
        probe = boot_and_run(
            kernel,
            ["true"],
            accel="kvm",
            boot_timeout=KVM_PROBE_S,
            timeout=KVM_PROBE_S,
            output=subprocess.DEVNULL,
            state_disk=False,
        )
        verdicts = {k: v for k, v in verdicts.items() if k.startswith(boot_id())}
        verdicts[key] = (
            "kvm"
            if probe.status == "done"
            else (
                f"hung before its init ({KVM_PROBE_S} s)"
                if probe.seconds >= KVM_PROBE_S
                else f"qemu stopped after {probe.seconds:.0f} s, before its init"
            )
        )
        LOG_ROOT.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(verdicts))
        tmp.replace(cache)
    if verdicts[key] == "kvm":
        return "kvm", "running under KVM (a probe boot with KVM succeeded)"
    return "tcg", (
        f"running under TCG: /dev/kvm opens, but a probe boot of this kernel with KVM failed: "
        f"{verdicts[key]} (as nested KVM does with stock kernels)"
    )


# ---- the guest side ----

GUEST_SCRIPT = r"""#!/bin/sh
# Generated by kernels/vm.py: prepares the guest, then runs the command.
RW={rw}
echo up > "$RW/booted"
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
for m in loop ext4 xfs btrfs; do modprobe "$m" || echo "vm: modprobe $m failed" >&2; done
mkdir -p /dev/disk/by-id
for d in /sys/block/vd*; do  # udev may not be running: name the disks by serial ourselves
  s=$(cat "$d/serial" 2>/dev/null) && [ -n "$s" ] && [ ! -e "/dev/disk/by-id/virtio-$s" ] && \
    ln -s "/dev/${{d##*/}}" "/dev/disk/by-id/virtio-$s"
done
if [ -e /dev/disk/by-id/virtio-fsprof-delay ]; then  # --disk-model delay
  d=$(readlink -f /dev/disk/by-id/virtio-fsprof-delay); n=$(blockdev --getsz "$d"); ms={delay_ms}
  modprobe dm-delay && {{ dmsetup create --noudevsync fsprof-delay \
    --table "0 $n delay $d 0 $ms $d 0 $ms $d 0 $ms" 2>/dev/null || \
    dmsetup create --noudevsync fsprof-delay --table "0 $n delay $d 0 $ms"; }} && dmsetup mknodes fsprof-delay || \
    echo "vm: could not set up dm-delay on $d" >&2
fi
if [ -n "{state}" ]; then
  mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 /dev/disk/by-id/virtio-{state} && \
    mkdir -p /var/tmp/fsprof && mount /dev/disk/by-id/virtio-{state} /var/tmp/fsprof || \
    {{ echo "vm: could not make fsprof's state disk" >&2; echo 125 > "$RW/rc"; exit 125; }}
  mkdir -p /var/tmp/fsprof/tmp
  export TMPDIR=/var/tmp/fsprof/tmp
fi
export PYTHONDONTWRITEBYTECODE=1
cd {cwd} || exit 125
{command}
rc=$?
cd /
[ -n "{state}" ] && {{ sync; umount /var/tmp/fsprof 2>/dev/null; }}
echo $rc > "$RW/rc"
exit $rc
"""


def drive_opts(index, image, cache_opts, serial):
    return [
        "-drive",
        f"if=none,id=fsprofd{index},file={image},format=raw,{cache_opts}",
        "-device",
        f"virtio-blk-pci,drive=fsprofd{index},serial={serial}",
    ]


def copy_output(pipe, output):
    """The guest's output, as it comes, to `output` (None: our stdout; DEVNULL: nowhere)."""
    dest = sys.stdout.buffer if output is None else None if output == subprocess.DEVNULL else output
    for chunk in iter(lambda: pipe.read1(65536), b""):
        if dest is not None:
            dest.write(chunk)
            dest.flush()


def kill_group(proc):
    """Stop vng and the qemu it started (they share the process group we gave vng)."""
    if proc is None:
        return
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
    proc.poll()


def check_visible(path):
    """A VMError unless the guest sees `path` (the guest would find nothing there and stop at once)."""
    path = Path(path).resolve()
    hidden = next((d for d in GUEST_TMPFS if path == d or d in path.parents), None)
    if hidden:
        raise VMError(
            f"{path} is under {hidden}, which the guest mounts a tmpfs over (virtme's init): "
            f"use a tree outside {' and '.join(map(str, GUEST_TMPFS))}",
            USAGE,
        )


def boot_and_run(
    kernel,
    argv,
    *,
    accel="tcg",
    cwd=None,
    timeout=3600,
    boot_timeout=600,
    memory="4G",
    cpus=2,
    disks=(),
    disk_size="4G",
    delay_ms=8,
    state_disk=True,
    state_size="16G",
    rwdirs=(),
    output=None,
    verbose=False,
    watch=None,
):
    """Boot `kernel` (a resolved path), run argv in it. `timeout` counts from the guest's start of
    our script; `boot_timeout` until then. output: a file (or DEVNULL) for the guest's stdout and
    stderr and vng's own, None for ours. watch: called about twice a second once the guest runs
    our script; a string it returns stops the VM with that as the reason. Never leaves a process
    or an image behind."""
    check_qemu()
    vng = find_vng()
    cwd = Path(cwd or os.getcwd()).resolve()
    check_visible(cwd)
    tmp = Path(tempfile.mkdtemp(prefix="fsprof-vm-"))
    proc = None
    start = time.monotonic()
    try:
        qemu_opts = []
        drives = ([(STATE_SERIAL, "cache=unsafe", state_size)] if state_disk else []) + [
            (DISK_MODELS[m][1], DISK_MODELS[m][0], disk_size) for m in disks
        ]
        for i, (serial, cache_opts, size) in enumerate(drives):
            image = tmp / f"{serial}.img"
            subprocess.run(["truncate", "-s", size, str(image)], check=True)  # sparse
            qemu_opts += drive_opts(i, image, cache_opts, serial)
        (tmp / "guest.sh").write_text(
            GUEST_SCRIPT.format(
                rw=shlex.quote(str(tmp)),
                state=STATE_SERIAL if state_disk else "",
                cwd=shlex.quote(str(cwd)),
                command=shlex.join(argv),
                delay_ms=int(delay_ms),
            )
        )
        cmd = [
            str(vng),
            "--run",
            str(kernel),
            "--memory",
            memory,
            "--cpus",
            str(cpus),
            "--name",
            "fsprof-vm",
            "--rwdir",
            str(tmp),
            *[f"--rwdir={d}" for d in rwdirs],
        ]
        if str(cwd) != "/" and not any(str(cwd).startswith(str(d)) for d in rwdirs):
            cmd.append(f"--overlay-rwdir={cwd}")  # the command may write in its cwd; it stays in the guest
        if accel == "tcg":
            cmd.append("--disable-kvm")
            # One host thread for all vCPUs. Multi-threaded TCG (qemu 7.2) mishandles the kernel's
            # live code patching when a tracepoint is switched on or off while another vCPU runs
            # it: seen as "Oops: int3" panics and, in a CI run, both vCPUs spinning for an hour on
            # the patched jump in submit_bio_noacct_nocheck (soft lockup). Two vCPUs are kept.
            qemu_opts += ["-accel", "tcg,thread=single"]
        # A guest stuck on one CPU ends the VM (panic=-1 and -no-reboot come from vng) instead of
        # holding it until the timeout; a lockup must last 60 s (watchdog_thresh 30) to count.
        cmd += ["--append", "softlockup_panic=1", "--append", "watchdog_thresh=30"]
        if verbose:
            cmd.append("--verbose")  # the kernel's console too: what a boot that hangs printed
        if qemu_opts:
            cmd.append("--qemu-opts=" + shlex.join(qemu_opts))
        cmd += ["--", "sh", str(tmp / "guest.sh")]
        # vng finds virtme-run next to itself; its own temp files go into our dir (removed below).
        env = {**os.environ, "PATH": f"{vng.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}", "TMPDIR": str(tmp)}
        # Through a pipe, never a file: qemu opens /proc/self/fd/1 anew, which would truncate a
        # file and write over it from offset 0.
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(tmp),
            start_new_session=True,
        )
        copier = threading.Thread(target=copy_output, args=(proc.stdout, output), daemon=True)
        copier.start()
        booted_at = None
        while True:
            try:
                proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if booted_at is None and (tmp / "booted").exists():
                booted_at = now
            if booted_at is None and now - start > boot_timeout:
                return Outcome(
                    "no-boot",
                    NO_BOOT,
                    0,
                    now - start,
                    f"the VM did not boot within {boot_timeout:g} s (kernel {kernel.name})",
                )
            if booted_at is not None and now - booted_at > timeout:
                return Outcome(
                    "timeout",
                    TIMED_OUT,
                    booted_at - start,
                    now - start,
                    f"the command did not end within {timeout:g} s: the VM was stopped",
                )
            stop = watch() if watch is not None and booted_at is not None else None
            if stop:
                return Outcome("timeout", TIMED_OUT, booted_at - start, now - start, stop)
        copier.join(timeout=10)
        now = time.monotonic()
        if booted_at is None and (tmp / "booted").exists():
            booted_at = now
        rc_file = tmp / "rc"
        if rc_file.exists() and rc_file.read_text().strip().isdigit():
            return Outcome("done", int(rc_file.read_text()), (booted_at or now) - start, now - start)
        if booted_at is None:
            return Outcome(
                "no-boot",
                NO_BOOT,
                0,
                now - start,
                f"the VM exited (vng status {proc.returncode}) before its kernel started the command"
                f" (kernel {kernel.name}; --verbose shows its console)",
            )
        return Outcome(
            "stopped",
            NO_BOOT,
            booted_at - start,
            now - start,
            "the VM stopped before the command ended (a kernel panic or crash; --verbose shows the console)",
        )
    finally:
        kill_group(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def raise_on_signals():
    """SIGTERM and SIGHUP unwind like Ctrl-C does, so the VM is stopped and its images removed."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m kernels.vm",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="disk models: "
        + "; ".join(f"{n} (/dev/disk/by-id/virtio-{s}): {d}" for n, (_, s, d) in DISK_MODELS.items()),
    )
    parser.add_argument("--kernel", required=True, help="a version installed in /boot (6.1, 6.12) or an image path")
    parser.add_argument(
        "--accel",
        choices=("auto", "kvm", "tcg"),
        default="auto",
        help="auto: KVM if a probe boot with it works, else TCG (default)",
    )
    parser.add_argument(
        "--disk-model",
        action="append",
        default=[],
        choices=sorted(DISK_MODELS),
        help="add an emulated disk of this model (repeatable)",
    )
    parser.add_argument("--disk-size", default="4G", help="size of each --disk-model disk (sparse; default 4G)")
    parser.add_argument("--delay-ms", type=int, default=8, help="the delay model's latency per I/O (default 8 ms)")
    parser.add_argument(
        "--rwdir", action="append", default=[], help="a host directory the guest may write (repeatable)"
    )
    parser.add_argument("--memory", default="4G")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds the command may take (default 3600)")
    parser.add_argument("--boot-timeout", type=float, default=600, help="seconds the boot may take (default 600)")
    parser.add_argument("--kvm-dev", default="/dev/kvm", help=argparse.SUPPRESS)
    parser.add_argument("-v", "--verbose", action="store_true", help="show the guest kernel's console")
    parser.add_argument("command", nargs="+", help="the command to run in the guest (after --)")
    args = parser.parse_args(argv)
    raise_on_signals()

    def say(msg):
        print(msg, file=sys.stderr, flush=True)

    try:
        for d in args.rwdir:
            if not Path(d).is_dir():
                raise VMError(f"--rwdir {d} is not a directory", USAGE)
        if len(set(args.disk_model)) != len(args.disk_model):
            raise VMError("each --disk-model may be given once (its serial names it in the guest)", USAGE)
        if args.accel == "kvm":  # the machine's lack first: it holds whatever else is installed
            require_kvm(args.kvm_dev)
        kernel = resolve_kernel(args.kernel)
        check_qemu()
        find_vng()
        accel, why = choose_accel(kernel, args.accel, args.kvm_dev, say)
        say(f"vm: booting {kernel} ({why})")
        out = boot_and_run(
            kernel,
            args.command,
            accel=accel,
            timeout=args.timeout,
            boot_timeout=args.boot_timeout,
            memory=args.memory,
            cpus=args.cpus,
            disks=args.disk_model,
            disk_size=args.disk_size,
            delay_ms=args.delay_ms,
            rwdirs=args.rwdir,
            verbose=args.verbose,
        )
    except VMError as e:
        say(f"vm: {e}")
        return e.code
    except KeyboardInterrupt:
        say("vm: interrupted: the VM was stopped and its disk images removed")
        return 130
    if out.message:
        say(f"vm: {out.message}")
    if out.status != "no-boot":
        say(f"vm: boot {out.boot_s:.0f} s, total {out.seconds:.0f} s, exit status {out.rc}")
    return out.rc


if __name__ == "__main__":
    sys.exit(main())
