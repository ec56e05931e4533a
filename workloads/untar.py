"""untar: extract a Linux kernel source tree (about 84,000 entries, 1.3 GB), then sync.

The tree is Debian's linux-source package (/usr/src/linux-source-*.tar.xz), decompressed once to a
plain .tar in a cache directory that survives runs, so that the timing measures the filesystem and
not xz. Without the package (or with --synthetic) a seeded synthetic tree of the same shape is
generated instead (workloads/synthetic_tree.py), and the output says so.

The extraction is done by a C engine (workloads/untar.c, libarchive as bsdtar uses it) with GNU
tar's semantics: as root, owners, modes and mtimes are restored as `tar -xf` does; writes are cut
at GNU tar's 10 KiB records. Phases: "extract" (the extraction, up to the deferred directory
times) and "sync" (syncfs(2) of the filesystem under test: the cwd's). Preparing the tarball, and
the engine's mapping of it into memory (populated, so the extraction does not read the disk the
cache is on), are in "startup", before either. Dirty and Writeback from /proc/meminfo are read
right after the extraction, before the sync.
"""

import contextlib
import glob
import json
import lzma
import os
import re
import subprocess
import tarfile

from . import synthetic_tree
from .common import Progress, UsageError, WorkloadError, WorkloadParser, engine_path, parse_size, run_main, write_result

NAME = "untar"
PHASES = ["extract", "sync"]
UNIT = "entry"  # compare's unit of work: counts per archive entry (the result's "entries")
DEFAULT_CACHE_DIR = "/var/tmp/fsprof/cache"
KERNEL_SOURCES = "/usr/src/linux-source-*.tar.xz"
GNU_TAR_RECORD = 10240  # GNU tar's default record (-b 20): its read and write size
CACHE_FORMAT = 1  # bump when the cache's sidecar layout changes
# The whole kernel tree takes about 1.5 GB on ext4: fsprof's default scratch image (16 GiB) holds
# it; a workload that needs more would set IMAGE_SIZE here.


def parser():
    ap = WorkloadParser(prog=NAME)
    ap.add_argument(
        "--files",
        default="all",
        metavar="N|FRACTION",
        help="extract only the first N entries, or this fraction of them (e.g. 0.1); default all",
    )
    ap.add_argument(
        "--synthetic",
        action="store_true",
        help="use the seeded synthetic tree even when the kernel source is installed",
    )
    ap.add_argument("--seed", type=int, default=1, help="the synthetic tree's seed (default 1)")
    ap.add_argument("--source", help="the kernel source .tar.xz (default: the newest " + KERNEL_SOURCES + ")")
    ap.add_argument(
        "--cache-dir",
        default=DEFAULT_CACHE_DIR,
        help="where the plain tarball is kept between runs (default %(default)s)",
    )
    ap.add_argument(
        "--record-size",
        type=parse_size,
        default=GNU_TAR_RECORD,
        help="file data is written in the pieces records of this size cut it into, as GNU "
        "tar's reads do (default 10240, GNU tar's -b 20)",
    )
    ap.add_argument(
        "--no-same-owner",
        action="store_true",
        help="extract as GNU tar does for an ordinary user: files owned by the extracting "
        "user, modes masked by the umask (default as root: owners and modes restored)",
    )
    return ap


# ---- parameters ---------------------------------------------------------------------------------


def files_spec(text):
    """'all' -> None; '2000' -> 2000 (entries); '0.1' -> 0.1 (a fraction of the tree)."""
    if text == "all":
        return None
    if re.fullmatch(r"[+-]?\d+", text.strip()):
        return int(text)
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{NAME}: --files takes a number of entries or a fraction such as 0.1, not '{text}'")


def check(args):
    spec = files_spec(args.files)
    if isinstance(spec, int) and spec <= 0:
        raise UsageError(f"{NAME}: --files must be a positive number of entries, not {spec}")
    if isinstance(spec, float) and not 0 < spec <= 1:
        raise UsageError(f"{NAME}: --files as a fraction must be above 0 and at most 1, not {args.files}")
    if args.seed < 0:
        raise UsageError(f"{NAME}: --seed must be 0 or more, not {args.seed}")
    if args.record_size < 512 or args.record_size % 512:
        raise UsageError(f"{NAME}: --record-size must be a multiple of 512 bytes, not {args.record_size}")
    if args.source and args.synthetic:
        raise UsageError(f"{NAME}: --source and --synthetic exclude each other")
    if args.source and not (args.source.endswith(".tar.xz") and os.path.isfile(args.source)):
        raise UsageError(f"{NAME}: --source must name an existing .tar.xz file, not '{args.source}'")
    if args.synthetic:  # its size is known without the cache: said before the cache is looked at
        entries_wanted(spec, synthetic_tree.total_entries(), "the synthetic tree")
    ensure_cache_dir(args.cache_dir)


def ensure_cache_dir(path):
    # Only root makes it: fsprof checks the workload's arguments before it refuses a user who is
    # not root, and a directory that user made under /var/tmp/fsprof would be theirs in root's runs.
    if os.geteuid() != 0 and not os.path.isdir(path):
        parent = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(parent):  # the directory it would be made in
            parent = os.path.dirname(parent)
        if not (os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK)):
            raise UsageError(f"{NAME}: cannot create the cache directory {path}: {parent} is not writable")
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{NAME}: cannot create the cache directory {path}: {e.strerror}")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{NAME}: the cache directory {path} is not writable")


def entries_wanted(spec, total, tree_name):
    if spec is None:
        return total
    if isinstance(spec, float):
        return max(1, round(spec * total))
    if spec > total:
        raise UsageError(f"{NAME}: --files {spec} is more than the {total:,} entries of {tree_name}")
    return spec


# ---- the tarball: cached plain tar of the kernel source, or the synthetic tree -------------------


def newest_kernel_source():
    """The highest-versioned /usr/src/linux-source-*.tar.xz, or None."""

    def version(path):
        return [int(n) for n in re.findall(r"\d+", os.path.basename(path))]

    found = sorted(glob.glob(KERNEL_SOURCES), key=version)
    return found[-1] if found else None


@contextlib.contextmanager
def atomic_output(path):
    """Yields a temporary name next to path; renamed to path only when the block succeeds, so a
    reader never sees a half-written file (an interrupted run leaves at most the temporary)."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.rename(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def remove_stale_files(cache_dir):
    """Temporaries of runs that were killed (their pid is gone), and synthetic tarballs of an
    older generator (the current one would never read them)."""
    for name in os.listdir(cache_dir):
        tmp = re.fullmatch(r"\..+\.(\d+)\.tmp", name)
        old = re.match(r"synthetic-v(\d+)-", name)
        if (tmp and not os.path.exists(f"/proc/{tmp.group(1)}")) or (
            old and int(old.group(1)) != synthetic_tree.GENERATOR_VERSION
        ):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(cache_dir, name))


def write_json_atomically(path, data):
    with atomic_output(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())


def read_sidecar(tar_path):
    """The cached tarball's description, or None when it or its tarball is missing or stale."""
    try:
        with open(tar_path + ".json") as f:
            meta = json.load(f)
        if meta.get("cache_format") == CACHE_FORMAT and os.path.getsize(tar_path) == meta["tar_bytes"]:
            return meta
    except (OSError, ValueError, KeyError):
        pass
    return None


def count_entries(tar_path):
    counts = {"entries": 0, "files": 0, "dirs": 0, "symlinks": 0, "bytes": 0}
    with tarfile.open(tar_path) as tar:
        for m in tar:
            counts["entries"] += 1
            kind = "files" if m.isfile() else "dirs" if m.isdir() else "symlinks" if m.issym() else None
            if kind:
                counts[kind] += 1
            counts["bytes"] += m.size if m.isfile() else 0
    return counts


def decompress(source, tar_path, progress):
    with atomic_output(tar_path) as tmp:
        with lzma.open(source) as src, open(tmp, "wb") as dst:
            done = 0
            while chunk := src.read(1 << 20):
                dst.write(chunk)
                done += len(chunk)
                progress.update(f"{done / 1e6:,.0f} MB")
            dst.flush()
            os.fsync(dst.fileno())


def kernel_tarball(source, cache_dir):
    """(plain tar path, its sidecar) for the kernel source, decompressing it once into the cache."""
    tar_path = os.path.join(cache_dir, os.path.basename(source).removesuffix(".xz"))
    st = os.stat(source)
    meta = read_sidecar(tar_path)
    if meta and [meta["source"], meta["source_bytes"], meta["source_mtime_ns"]] == [source, st.st_size, st.st_mtime_ns]:
        return tar_path, meta
    progress = Progress(f"{NAME}: decompressing {os.path.basename(source)} into {cache_dir}", after=0.5)
    try:
        decompress(source, tar_path, progress)
        progress.update("counting entries")
        meta = {
            "cache_format": CACHE_FORMAT,
            "kind": "kernel",
            "source": source,
            "source_bytes": st.st_size,
            "source_mtime_ns": st.st_mtime_ns,
            "tar_bytes": os.path.getsize(tar_path),
            **count_entries(tar_path),
        }
        write_json_atomically(tar_path + ".json", meta)
    finally:
        progress.done()
    return tar_path, meta


def synthetic_tarball(seed, entries, cache_dir):
    """(tar path, sidecar) of the synthetic tree's first `entries` entries. The full tree, when
    cached, serves any count: the first N entries of it are the tree of N entries."""
    stem = f"synthetic-v{synthetic_tree.GENERATOR_VERSION}-seed{seed}"
    full = os.path.join(cache_dir, f"{stem}.tar")
    if meta := read_sidecar(full):
        for partial in glob.glob(os.path.join(cache_dir, f"{stem}-first*.tar*")):  # served by the full tree
            with contextlib.suppress(OSError):
                os.unlink(partial)
        return full, meta
    total = synthetic_tree.total_entries()
    tar_path = full if entries >= total else os.path.join(cache_dir, f"{stem}-first{entries}.tar")
    if meta := read_sidecar(tar_path):
        return tar_path, meta
    progress = Progress(f"{NAME}: generating the synthetic tree (seed {seed}) into {cache_dir}", after=0.5)
    try:
        with atomic_output(tar_path) as tmp:
            counts = synthetic_tree.generate(
                tmp,
                seed,
                None if entries >= total else entries,
                progress=lambda done, n: progress.update(f"{done:,}/{n:,} entries"),
            )
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        meta = {
            "cache_format": CACHE_FORMAT,
            "kind": "synthetic",
            "seed": seed,
            "generator_version": synthetic_tree.GENERATOR_VERSION,
            "tar_bytes": os.path.getsize(tar_path),
            **counts,
        }
        write_json_atomically(tar_path + ".json", meta)
    finally:
        progress.done()
    return tar_path, meta


def prepare_tree(args):
    """(tar path, its sidecar, entries to extract, why synthetic or None)."""
    spec = files_spec(args.files)
    source = args.source or (None if args.synthetic else newest_kernel_source())
    try:
        remove_stale_files(args.cache_dir)
        if source:
            tar_path, meta = kernel_tarball(source, args.cache_dir)
            return tar_path, meta, entries_wanted(spec, meta["entries"], os.path.basename(tar_path)), None
        total = synthetic_tree.total_entries()
        wanted = entries_wanted(spec, total, "the synthetic tree")
        tar_path, meta = synthetic_tarball(args.seed, wanted, args.cache_dir)
        why = (
            "asked for with --synthetic"
            if args.synthetic
            else f"there is no {KERNEL_SOURCES} (Debian package linux-source-6.1)"
        )
        return tar_path, meta, wanted, why
    except OSError as e:
        raise WorkloadError(
            f"{NAME}: cannot prepare the tarball in the cache directory {args.cache_dir}: "
            f"{e.strerror or e} (the kernel tree needs about 1.4 GB there)"
        )


# ---- the measured part: the engine ---------------------------------------------------------------


def run_engine(tar_path, entries, args):
    progress = Progress(f"{NAME}: extracting")
    argv = [engine_path("untar"), "--tar", tar_path, "--entries", str(entries), "--record-size", str(args.record_size)]
    argv += ["--progress"] if progress.tty else []
    argv += ["--no-owner"] if args.no_same_owner else []
    last = None
    try:
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, errors="replace") as proc:
            for line in proc.stdout:
                if line.startswith("progress "):
                    done, nbytes = map(int, line.split()[1:3])
                    progress.update(f"{done:,}/{entries:,} entries, {nbytes / 1e6:,.0f} MB")
                else:
                    last = line
    finally:
        progress.done()
    if not last:
        raise WorkloadError(f"{NAME}: the engine exited with status {proc.returncode} and no result")
    return json.loads(last)


def human_bytes(n):
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def failure_sentence(error, entries, meta):
    """One sentence for an extraction that stopped, with df/df -i figures for a full filesystem."""
    where = f"after {error['entry']:,} of {entries:,} entries"
    if error["errname"] not in ("ENOSPC", "EDQUOT"):
        return f"{NAME}: {error['where']} failed {where} ({error['path'] or 'tarball'}): {error['message']}"
    st = os.statvfs(".")
    inodes_used, bytes_used = st.f_files - st.f_ffree, (st.f_blocks - st.f_bfree) * st.f_frsize
    what = "inodes" if st.f_favail == 0 and st.f_files else "space"
    if error["errname"] == "EDQUOT":
        what = "quota"
    data = f" and {human_bytes(meta['bytes'])} of file data" if entries == meta["entries"] else ""
    hint = {
        "inodes": "more inodes: fsprof run --mkfs-options, --image-size",
        "space": "fsprof run --image-size 3G holds the whole kernel tree",
        "quota": "a larger quota",
    }[what]
    return (
        f"{NAME}: the filesystem ran out of {what} {where} (creating {error['path']}): "
        f"inodes {inodes_used:,}/{st.f_files:,} used, space {human_bytes(bytes_used)}/"
        f"{human_bytes(st.f_blocks * st.f_frsize)} used; these {entries:,} entries need "
        f"{entries:,} inodes{data} ({hint})."
    )


def main(args):
    tar_path, meta, entries, synthetic_why = prepare_tree(args)  # phase 0, "startup"
    raw = run_engine(tar_path, entries, args)  # the engine marks "extract" and "sync"
    if "error" in raw:
        raise WorkloadError(failure_sentence(raw["error"], entries, meta))
    result = build_result(args, tar_path, meta, entries, synthetic_why, raw)
    write_result(args.result, result)
    if not args.result:
        print(render(result))


def build_result(args, tar_path, meta, entries, synthetic_why, raw):
    extract_s = raw["extract_ns"] / 1e9
    return {
        "workload": NAME,
        "phases": PHASES,
        "params": {
            "files": args.files,
            "entries_requested": entries,
            "synthetic": synthetic_why is not None,
            "seed": args.seed if synthetic_why else None,
            "cache_dir": args.cache_dir,
            "record_size": args.record_size,
            "same_owner": raw["restore_owner"],
        },
        "tree": {
            "kind": meta["kind"],
            "synthetic_because": synthetic_why,
            "source": meta.get("source"),
            "entries": synthetic_tree.total_entries() if synthetic_why else meta["entries"],
            "tarball": tar_path,
            "tarball_entries": meta["entries"],
            "tarball_file_bytes": meta["bytes"],
        },
        **{
            k: raw[k]
            for k in (
                "entries",
                "files",
                "dirs",
                "symlinks",
                "hardlinks",
                "other",
                "bytes",
                "warnings",
                "extract_ns",
                "extract_cpu_ns",
                "sync_ns",
                "dirty_kb",
                "writeback_kb",
                "dirty_after_sync_kb",
                "writeback_after_sync_kb",
            )
        },
        "sync_call": "syncfs",
        "elapsed_ns": raw["extract_ns"] + raw["sync_ns"],
        "entries_per_s": raw["entries"] / extract_s if extract_s else None,
        "files_per_s": raw["files"] / extract_s if extract_s else None,
        "mb_per_s": raw["bytes"] / 1e6 / extract_s if extract_s else None,
    }


def render(result):
    tree = result["tree"]
    name = os.path.basename(tree["tarball"])
    origin = (
        f"SYNTHETIC tree, seed {result['params']['seed']}: {tree['synthetic_because']}"
        if tree["kind"] == "synthetic"
        else f"from {tree['source']}"
    )
    part = (
        "all entries"
        if result["entries"] == tree["entries"]
        else f"first {result['entries']:,} of {tree['entries']:,} entries"
    )
    owner = (
        "owners, modes and mtimes restored"
        if result["params"]["same_owner"]
        else "mtimes restored, modes under the umask"
    )
    lines = [
        f"untar: {name} ({origin}), {part}; as GNU tar -xf: {owner}",
        f"  extracted  {result['entries']:,} entries ({result['files']:,} files, {result['dirs']:,} dirs, "
        f"{result['symlinks']:,} symlinks), {human_bytes(result['bytes'])} of file data",
        f"  extract    {result['extract_ns'] / 1e9:8.3f} s   {result['files_per_s'] or 0:,.0f} files/s   "
        f"{result['entries_per_s'] or 0:,.0f} entries/s   {result['mb_per_s'] or 0:,.1f} MB/s   "
        f"(CPU {result['extract_cpu_ns'] / 1e9:.3f} s)",
        f"  sync       {result['sync_ns'] / 1e9:8.3f} s   (syncfs of the filesystem under test)",
        f"  right after the extraction: Dirty {result['dirty_kb']:,} kB, "
        f"Writeback {result['writeback_kb']:,} kB (/proc/meminfo, whole machine)",
    ]
    if result["warnings"]:
        lines.append(f"  {result['warnings']:,} entries extracted with a warning (an owner not restored?)")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(run_main(__import__(__name__)))
