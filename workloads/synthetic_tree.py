"""A deterministic synthetic stand-in for the Linux kernel source tree, for machines where Debian's
linux-source package cannot be installed.

The tree's shape and file sizes follow MODEL, measured once from the real tarball with
`python -m workloads.synthetic_tree --measure /usr/src/linux-source-6.1.tar.xz` (linux-source-6.1
6.1.192-2, 83,731 entries, 1.30 GB of file data). `--compare REAL.tar.xz --seed S` prints the real
and the synthetic figures side by side.

How the tree is drawn from a seed (every distribution is sampled stratified: one draw from each
1/n slice, shuffled, so that tails such as the few files of several MB come out as measured
instead of by luck of the draw):
  * exactly MODEL's number of directories at each depth; at each depth, exactly as many parents
    have subdirectories as in the real tree, with subdirectory counts from the real histogram,
    adjusted within their histogram buckets to the depth's total;
  * files per directory from the real histogram, exactly the real total of files, moved between
    directories so that each depth holds as many files as in the real tree;
  * file sizes from the real size quantiles (log-linear between them);
  * name lengths from the real quantiles, names from [a-z0-9_.-], children in byte order, the tar
    in pre-order like the real one (GNU format, root-owned, one mtime);
  * symlinks: relative links to files elsewhere in the tree;
  * content: slices of a seeded pseudo-text pool (C-like tokens), so it compresses roughly like
    source code on filesystems that compress.

Entry k of the tree does not depend on how many entries are written, so a tarball of the first N
entries is a prefix (entry for entry) of the full one.

Over 500 lines: MODEL, the seeded drawing from it, and --measure/--compare, which check the drawing
against the real tarball, change together.
"""

import argparse
import bisect
import io
import itertools
import math
import random
import sys
import tarfile

GENERATOR_VERSION = 2  # part of cached tarballs' names: bump when the output for a seed changes
ROOT = "linux-synthetic"

# Measured by measure() from /usr/src/linux-source-6.1.tar.xz (Debian linux-source-6.1 6.1.192-2).
MODEL = {
    "files": 78579,
    "dirs": 5096,
    "symlinks": 56,
    "file_bytes": 1298681992,
    "mtime": 1793988916,
    "exec_file_fraction": 0.010359,  # files with mode 0755 (the rest are 0644)
    # directories at depth 0, 1, 2, ... (the root is depth 0)
    "dirs_per_depth": [1, 24, 608, 1505, 1383, 835, 287, 233, 164, 56],
    # files whose directory is at depth d
    "files_per_depth": [14, 1101, 13741, 24933, 20826, 11667, 3047, 2509, 510, 231],
    # directories at depth d that have at least one subdirectory
    "parents_per_depth": [1, 20, 214, 307, 288, 115, 40, 48, 40],
    # histograms of [low, high, count]: one bucket per value below 16, then powers of two
    "files_per_dir": [
        [0, 0, 321],
        [1, 1, 409],
        [2, 2, 472],
        [3, 3, 492],
        [4, 4, 416],
        [5, 5, 320],
        [6, 6, 272],
        [7, 7, 245],
        [8, 8, 201],
        [9, 9, 172],
        [10, 10, 150],
        [11, 11, 135],
        [12, 12, 91],
        [13, 13, 80],
        [14, 14, 71],
        [15, 15, 87],
        [16, 31, 639],
        [32, 63, 324],
        [64, 127, 126],
        [128, 255, 56],
        [256, 511, 12],
        [512, 1023, 3],
        [1024, 2047, 1],
        [2048, 4095, 1],
    ],
    "subdirs_per_parent": [
        [1, 1, 465],
        [2, 2, 221],
        [3, 3, 94],
        [4, 4, 70],
        [5, 5, 45],
        [6, 6, 22],
        [7, 7, 21],
        [8, 8, 18],
        [9, 9, 10],
        [10, 10, 11],
        [11, 11, 5],
        [12, 12, 7],
        [13, 13, 5],
        [14, 14, 4],
        [15, 15, 6],
        [16, 31, 44],
        [32, 63, 15],
        [64, 127, 9],
        [128, 255, 1],
    ],
    # file size quantiles: (cumulative probability, bytes)
    "size_quantiles": [
        (0.0, 0),
        (0.0005, 10),
        (0.001, 14),
        (0.002, 26),
        (0.005, 48),
        (0.01, 73),
        (0.02, 125),
        (0.05, 254),
        (0.1, 446),
        (0.15, 687),
        (0.2, 959),
        (0.25, 1280),
        (0.3, 1621),
        (0.35, 2038),
        (0.4, 2525),
        (0.45, 3129),
        (0.5, 3874),
        (0.55, 4787),
        (0.6, 5910),
        (0.65, 7264),
        (0.7, 9044),
        (0.75, 11416),
        (0.8, 14832),
        (0.85, 19904),
        (0.9, 28758),
        (0.92, 34363),
        (0.94, 42596),
        (0.95, 48085),
        (0.96, 55875),
        (0.97, 66614),
        (0.98, 83935),
        (0.985, 98095),
        (0.99, 124603),
        (0.9925, 147476),
        (0.995, 191187),
        (0.9965, 252777),
        (0.998, 402767),
        (0.9985, 688553),
        (0.999, 1119149),
        (0.9993, 1486409),
        (0.9995, 2103101),
        (0.9997, 5131730),
        (0.9998, 6510386),
        (0.99985, 6831284),
        (0.9999, 11368060),
        (0.99995, 14151728),
        (1.0, 23944620),
    ],
    # basename length quantiles (characters)
    "file_name_quantiles": [
        (0.0, 2),
        (0.01, 4),
        (0.1, 6),
        (0.25, 8),
        (0.5, 12),
        (0.75, 16),
        (0.9, 21),
        (0.99, 32),
        (1.0, 60),
    ],
    "dir_name_quantiles": [
        (0.0, 1),
        (0.01, 2),
        (0.1, 3),
        (0.25, 4),
        (0.5, 5),
        (0.75, 7),
        (0.9, 10),
        (0.99, 16),
        (1.0, 23),
    ],
}

NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-."
POOL_BYTES = 1 << 20
TOKENS = [
    "static",
    "int",
    "struct",
    "return",
    "if",
    "(",
    ")",
    "{",
    "}",
    ";",
    "*",
    "=",
    "->",
    "unsigned",
    "long",
    "void",
    "const",
    "0",
    "1",
    "NULL",
    "err",
    "dev",
    "\n",
    "\n\t",
    "\n\t\t",
    " ",
    " ",
    " ",
    "#include",
    "<linux/",
    ".h>",
    "/*",
    "*/",
    "u32",
    "ret",
    "goto",
]


def total_entries():
    return MODEL["files"] + MODEL["dirs"] + MODEL["symlinks"]


# ---- drawing the tree --------------------------------------------------------------------------


class Node:
    __slots__ = ("name", "kind", "size", "mode", "children", "target", "pool_offset", "parent", "depth")

    def __init__(self, name, kind, parent):
        self.name, self.kind, self.parent = name, kind, parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.children, self.size, self.mode, self.target, self.pool_offset = [], 0, 0o755, "", 0


def _stratified(rng, n, value_at):
    """n values, one from each 1/n slice of a distribution (value_at(u) is its inverse CDF),
    shuffled: the tails come out as in the real tree instead of by luck of the draw."""
    values = [value_at((i + rng.random()) / n) for i in range(n)]
    rng.shuffle(values)
    return values


def _from_buckets(rng, buckets, n):
    """n draws (value, low, high) following a histogram of [low, high, count] buckets; within a
    wide bucket log-uniform, as counts of things crowd towards a bucket's low end."""
    total = sum(count for _, _, count in buckets)
    edges = list(itertools.accumulate(count / total for _, _, count in buckets))

    def value_at(u):
        low, high, _ = buckets[min(bisect.bisect_left(edges, u), len(buckets) - 1)]
        value = low if low == high else min(high, int(low * ((high + 1) / low) ** rng.random()))
        return value, low, high

    return _stratified(rng, n, value_at)


def _adjusted_to_total(draws, total):
    """The values of `draws` (value, low, high) changed to sum to total. The change goes to the
    values from wide buckets, in proportion to their size and within their bucket, so that the
    histogram stays as drawn; only what that cannot absorb is shared by all values."""
    out = [value for value, _, _ in draws]
    for within_buckets in (True, False):
        while sum(out) != total:
            diff = total - sum(out)
            room = [_room(v, low, high, diff, within_buckets, total) for v, (_, low, high) in zip(out, draws)]
            weights = [v + 1 if r > 0 else 0 for v, r in zip(out, room)]
            if not any(weights):
                break
            wsum = sum(weights)
            steps = [min(r, abs(math.trunc(diff * w / wsum))) for w, r in zip(weights, room)]
            if not any(steps):  # less than one per value left: one step on the largest
                steps[max(range(len(out)), key=lambda i: (weights[i], -i))] = 1
            out = [v + (step if diff > 0 else -step) for v, step in zip(out, steps)]
    return out


def _room(value, low, high, diff, within_buckets, total):
    """How far a value may move towards the total: inside a wide bucket, or down to 0."""
    if within_buckets:
        return 0 if high == low else (high - value if diff > 0 else value - low)
    return total if diff > 0 else value


def _from_quantiles(quantiles, u):
    """The value at cumulative probability u of a quantile table, log-linear between quantiles."""
    probs = [p for p, _ in quantiles]
    i = min(max(bisect.bisect_right(probs, u), 1), len(quantiles) - 1)
    (p0, v0), (p1, v1) = quantiles[i - 1], quantiles[i]
    frac = (u - p0) / (p1 - p0) if p1 > p0 else 0.0
    return int(round(math.exp(math.log1p(v0) + frac * (math.log1p(v1) - math.log1p(v0))) - 1))


def _unique_name(rng, taken, quantiles):
    while True:
        name = "".join(rng.choices(NAME_CHARS, k=max(1, _from_quantiles(quantiles, rng.random()))))
        if name not in taken and name not in (".", ".."):
            taken.add(name)
            return name


def _draw_directories(rng):
    """The directory nodes, level by level, with MODEL's counts per depth."""
    root = Node(ROOT, "dir", None)
    levels = [[root]]
    subdirs = _from_buckets(rng, MODEL["subdirs_per_parent"], sum(MODEL["parents_per_depth"]))
    for depth, count in enumerate(MODEL["dirs_per_depth"][1:]):
        above = levels[-1]
        parents = rng.sample(above, MODEL["parents_per_depth"][depth])
        # every chosen parent gets one subdirectory; the rest are shared as the histogram says
        extra = [(n - 1, low - 1, high - 1) for n, low, high in (subdirs.pop() for _ in parents)]
        level = []
        for parent, n in zip(parents, _adjusted_to_total(extra, count - len(parents))):
            taken = set()
            for _ in range(1 + n):
                child = Node(_unique_name(rng, taken, MODEL["dir_name_quantiles"]), "dir", parent)
                parent.children.append(child)
                level.append(child)
        levels.append(level)
    return [d for level in levels for d in level]


def _shared_by_depth(rng, counts, dirs, targets, rounds=200000):
    """counts (one per directory) moved between directories so that the files at each depth come
    near targets: swaps between a depth with too many and one with too few, kept when they bring
    both closer. The multiset of counts, so the files-per-directory histogram, is unchanged."""
    counts = list(counts)
    members = [[] for _ in targets]
    for i, d in enumerate(dirs):
        members[d.depth].append(i)
    sums = [sum(counts[i] for i in m) for m in members]
    for _ in range(rounds):
        over = [d for d, m in enumerate(members) if sums[d] > targets[d]]
        under = [d for d, m in enumerate(members) if sums[d] < targets[d]]
        if not over or not under:
            break
        d1, d2 = rng.choice(over), rng.choice(under)
        i, j = rng.choice(members[d1]), rng.choice(members[d2])
        delta = counts[i] - counts[j]
        before = (sums[d1] - targets[d1]) ** 2 + (sums[d2] - targets[d2]) ** 2
        after = (sums[d1] - delta - targets[d1]) ** 2 + (sums[d2] + delta - targets[d2]) ** 2
        if delta > 0 and after < before:
            counts[i], counts[j] = counts[j], counts[i]
            sums[d1] -= delta
            sums[d2] += delta
    return counts


def _add_files(rng, dirs):
    wanted = _adjusted_to_total(_from_buckets(rng, MODEL["files_per_dir"], len(dirs)), MODEL["files"])
    sizes = _stratified(rng, MODEL["files"], lambda u: _from_quantiles(MODEL["size_quantiles"], u))
    for directory, n in zip(dirs, _shared_by_depth(rng, wanted, dirs, MODEL["files_per_depth"])):
        taken = {c.name for c in directory.children}
        for _ in range(n):
            f = Node(_unique_name(rng, taken, MODEL["file_name_quantiles"]), "file", directory)
            f.size = sizes.pop()
            f.mode = 0o755 if rng.random() < MODEL["exec_file_fraction"] else 0o644
            f.pool_offset = rng.randrange(POOL_BYTES)
            directory.children.append(f)


def _path_parts(node):
    parts = []
    while node is not None:
        parts.append(node.name)
        node = node.parent
    return parts[::-1]


def _add_symlinks(rng, dirs, files):
    """Relative links to files elsewhere in the tree, as the kernel's (dts, uapi headers) are."""
    for _ in range(MODEL["symlinks"]):
        directory, target = rng.choice(dirs), rng.choice(files)
        here, there = _path_parts(directory), _path_parts(target)
        common = 0
        while common < min(len(here), len(there) - 1) and here[common] == there[common]:
            common += 1
        link = Node(
            _unique_name(rng, {c.name for c in directory.children}, MODEL["file_name_quantiles"]), "symlink", directory
        )
        link.mode = 0o777
        link.target = "/".join([".."] * (len(here) - common) + there[common:])
        directory.children.append(link)


def draw_tree(seed):
    """The whole tree for a seed, as a list of nodes in tar order (pre-order, names sorted)."""
    rng = random.Random(seed)
    dirs = _draw_directories(rng)
    _add_files(rng, dirs)
    files = [c for d in dirs for c in d.children if c.kind == "file"]
    _add_symlinks(rng, dirs, files)
    ordered, stack = [], [dirs[0]]
    while stack:
        node = stack.pop()
        ordered.append(node)
        stack.extend(sorted(node.children, key=lambda c: c.name.encode(), reverse=True))
    return ordered


# ---- writing the tarball -----------------------------------------------------------------------


def text_pool(seed):
    """POOL_BYTES of seeded C-like text: file contents are slices of it."""
    rng = random.Random(f"pool-{seed}")
    out, size = [], 0
    while size < POOL_BYTES:
        chunk = "".join(rng.choices(TOKENS, k=4096)).encode()
        out.append(chunk)
        size += len(chunk)
    return b"".join(out)[:POOL_BYTES]


class PoolReader(io.RawIOBase):
    """`size` bytes of the pool from `offset`, wrapping around: a file's content."""

    def __init__(self, pool, offset, size):
        self.pool, self.pos, self.left = pool, offset, size

    def readable(self):
        return True

    def read(self, n=-1):
        """Exactly min(n, what is left) bytes: tarfile takes a short read for a truncated file."""
        n = self.left if n is None or n < 0 else min(n, self.left)
        parts = []
        while n > 0:
            take = min(n, len(self.pool) - self.pos)
            parts.append(self.pool[self.pos : self.pos + take])
            self.pos = (self.pos + take) % len(self.pool)
            self.left -= take
            n -= take
        return b"".join(parts)


def _tarinfo(node):
    info = tarfile.TarInfo("/".join(_path_parts(node)))
    info.mtime, info.mode = MODEL["mtime"], node.mode
    info.uid, info.gid, info.uname, info.gname = 0, 0, "", ""  # as the real tarball: root, no names
    if node.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif node.kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, node.target
    else:
        info.size = node.size
    return info


def generate(path, seed, count=None, progress=None):
    """Writes the first `count` entries (all when None) of the tree for `seed` to `path`; returns
    {entries, files, dirs, symlinks, bytes}."""
    nodes = draw_tree(seed)[:count]
    pool = memoryview(text_pool(seed))
    counts = {"entries": 0, "files": 0, "dirs": 0, "symlinks": 0, "bytes": 0}
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for node in nodes:
            info = _tarinfo(node)
            data = PoolReader(pool, node.pool_offset, node.size) if node.kind == "file" else None
            tar.addfile(info, data)
            counts["entries"] += 1
            counts[node.kind + "s"] += 1
            counts["bytes"] += node.size
            if progress and counts["entries"] % 1000 == 0:
                progress(counts["entries"], len(nodes))
    return counts


# ---- measuring a real tree ---------------------------------------------------------------------


def _bucket_histogram(values, exact_below=16):
    """[low, high, count] buckets: one per value below exact_below, then powers of two."""
    counts = {}
    for v in values:
        low, high = (v, v) if v < exact_below else (1 << (v.bit_length() - 1), (1 << v.bit_length()) - 1)
        counts[(low, high)] = counts.get((low, high), 0) + 1
    return [[low, high, count] for (low, high), count in sorted(counts.items())]


def _quantiles(values, probs):
    values = sorted(values)
    return [(p, values[round(p * (len(values) - 1))]) for p in probs]


SIZE_PROBS = [p for p, _ in MODEL["size_quantiles"]]
NAME_PROBS = [p for p, _ in MODEL["file_name_quantiles"]]


def measure(tar_path):
    """The MODEL figures of a tarball (plain or compressed, as tarfile reads it)."""
    files_in, subdirs_in, depth_of = {}, {}, {}
    sizes, file_names, dir_names, modes, mtimes, symlinks = [], [], [], [], {}, 0
    with tarfile.open(tar_path) as tar:
        for m in tar:
            parts = m.name.rstrip("/").split("/")
            parent = "/".join(parts[:-1])
            mtimes[m.mtime] = mtimes.get(m.mtime, 0) + 1
            if m.isdir():
                depth_of[m.name.rstrip("/")] = len(parts) - 1
                files_in.setdefault(m.name.rstrip("/"), 0)
                subdirs_in.setdefault(m.name.rstrip("/"), 0)
                if parent:
                    subdirs_in[parent] = subdirs_in.get(parent, 0) + 1
                dir_names.append(len(parts[-1]))
            elif m.isfile():
                files_in[parent] = files_in.get(parent, 0) + 1
                sizes.append(m.size)
                file_names.append(len(parts[-1]))
                modes.append(m.mode & 0o111 != 0)
            elif m.issym():
                symlinks += 1
    depths = max(depth_of.values()) + 1
    return {
        "files": len(sizes),
        "dirs": len(depth_of),
        "symlinks": symlinks,
        "file_bytes": sum(sizes),
        "mtime": max(mtimes, key=mtimes.get),
        "exec_file_fraction": round(sum(modes) / len(modes), 6),
        "dirs_per_depth": [sum(1 for d in depth_of.values() if d == k) for k in range(depths)],
        "files_per_depth": [sum(n for p, n in files_in.items() if depth_of.get(p) == k) for k in range(depths)],
        "parents_per_depth": [
            sum(1 for p, d in depth_of.items() if d == k and subdirs_in[p]) for k in range(depths - 1)
        ],
        "files_per_dir": _bucket_histogram(files_in.values()),
        "subdirs_per_parent": _bucket_histogram([n for n in subdirs_in.values() if n]),
        "size_quantiles": _quantiles(sizes, SIZE_PROBS),
        "file_name_quantiles": _quantiles(file_names, NAME_PROBS),
        "dir_name_quantiles": _quantiles(dir_names, NAME_PROBS),
    }


def _compare(real_path, seed, out_path):
    generate(out_path, seed)
    real, synthetic = measure(real_path), measure(out_path)
    for key in MODEL:
        print(f"{key}:\n  real      {real[key]}\n  synthetic {synthetic[key]}")


def _main(argv):
    ap = argparse.ArgumentParser(prog="python -m workloads.synthetic_tree", description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", metavar="TARBALL", help="print MODEL's figures for a real tarball")
    ap.add_argument("--compare", metavar="TARBALL", help="real vs synthetic figures side by side")
    ap.add_argument("--generate", metavar="OUT.tar", help="write the synthetic tarball")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, help="first N entries only")
    args = ap.parse_args(argv)
    if args.measure:
        for key, value in measure(args.measure).items():
            print(f"    {key!r}: {value!r},")
    elif args.compare:
        _compare(args.compare, args.seed, args.generate or f"/tmp/synthetic-seed{args.seed}.tar")
    elif args.generate:
        print(generate(args.generate, args.seed, args.count))
    else:
        ap.print_help()


if __name__ == "__main__":
    _main(sys.argv[1:])
