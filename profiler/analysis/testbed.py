"""Where the test bed can make a result (docs/test-bed.md): a loop device over a buffered file
(its flushes are host writeback, its reads may be host page cache), a RAM device, a backing disk
that does not seek, and a filesystem small or full enough to wait for space. compare adds these
notes to a significant difference whose causes they bear on; the report adds the space one to a
run whose calls waited for space."""

from typing import Any

from .evidence import Group
from ..machine import device_model


# Causes whose time a loop device over a buffered file does not measure as a disk would.
FLUSH_CAUSE_WORDS = ("flush", "FUA")
READ_CAUSE_WORDS = ("read I/O",)
SEEK_CAUSE_WORDS = ("read I/O", "writeback", "flush", "FUA", "log block writes")
SPACE_CAUSE_WORDS = ("space reservation",)  # btrfs tickets, XFS "log space reservation"
# Below this a filesystem reserves for space sooner (btrfs: 16 GiB vs 2 GiB, 9,804 tickets vs 36).
SMALL_FILESYSTEM = 4 << 30
# A space cause this large a share of an op's time is a top cause (the report's test-bed line).
SPACE_SHARE = 0.10


def test_bed_notes(base: Group, other: Group, cmp: dict[str, Any]) -> list[str]:
    """Sentences on where the test bed (docs/test-bed.md) can make the difference: a loop device
    over a buffered file (its flushes are host writeback, its reads may be host page cache), a RAM
    device, a backing disk that does not seek. Only for the causes this comparison lists."""
    causes = [c["cause"] for c in cmp["causes"]]
    has = lambda words: any(w in c for c in causes for w in words)  # noqa: E731
    buffered: dict[str, str]
    ram: set[str]
    no_seek: dict[str, bool]
    models: dict[str, str]
    buffered, ram, no_seek, models = {}, set(), {}, {}
    for g in (base, other):
        for _, fs in g.entries:
            dev = fs["device"]
            bed = dev.get("test_bed") or {}
            model = bed.get("device_model")
            if model:
                models[dev["name"]] = device_model.describe(model) + ": " + model_effect(model)
            if bed.get("kind") == "loop" and not bed.get("direct_io"):
                buffered[dev["name"]] = bed.get("backing_disk") or "the backing filesystem"
            if bed.get("kind") == "zram":
                ram.add(dev["name"])
            disk = bed.get("backing_disk") if bed.get("kind") == "loop" else dev["name"]
            rotational = bed.get("backing_rotational") if bed.get("kind") == "loop" else dev.get("rotational")
            if bed.get("kind") != "zram" and disk and rotational is False:
                no_seek[disk] = True
    notes = []
    if has(SPACE_CAUSE_WORDS):
        for g in (base, other):
            note = space_note(g.entries[0][1])
            if note:
                notes.append(f"{g.name}: {note}")
    loops = ", ".join(sorted(buffered))
    disks = ", ".join(sorted(set(buffered.values())))
    if buffered and has(FLUSH_CAUSE_WORDS):
        notes.append(
            f"{loops}: a loop device over a buffered image file: its cache flush is an fsync of the image "
            f"file, whose pages the host writes back to {disks}; with barriers off nothing reaches "
            f"{disks} at all. Flush times here are the host's, not a disk write cache's "
            "(`--loop-io direct` passes I/O through)."
        )
    if buffered and has(READ_CAUSE_WORDS):
        notes.append(
            f"{loops}: reads of a buffered image may be served from the host's page cache (drop_caches "
            "keeps the image's dirty pages): read waits can be shorter than a disk's, and cold reads "
            "warm (`--loop-io direct` makes them reach the disk)."
        )
    if models and (has(SEEK_CAUSE_WORDS) or has(FLUSH_CAUSE_WORDS)):
        for name, words in sorted(models.items()):
            notes.append(f"{name}: an emulated device, {words}")
    if ram and (has(FLUSH_CAUSE_WORDS) or has(READ_CAUSE_WORDS)):
        notes.append(f"{', '.join(sorted(ram))}: a RAM device (zram): no write cache to flush, no seeks.")
    if no_seek and has(SEEK_CAUSE_WORDS):
        notes.append(
            f"{', '.join(sorted(no_seek))} does not rotate: differences that a rotating disk's seeks "
            "would make do not show here."
        )
    return notes


def model_effect(model: dict[str, Any]) -> str:
    """What an emulated device's model does to the times a run measures (docs/test-bed.md)."""
    delays = model["read_ms"] or model["write_ms"] or model["flush_ms"]
    held = (
        "each bio of a class is held that long before it reaches the device below (rounded up to the "
        "kernel's timer tick)"
    )
    if not model.get("cache_mib"):
        return f"{held}; the times are the model's plus the loop's, not a disk's."
    cache = (
        "writes land in a RAM device's volatile write cache and a flush copies it to RAM, so a flush "
        "costs what was written since the last one, far less than a disk's"
    )
    return f"{held}, then {cache}." if delays else f"{cache}."


def space_figure(fs: dict[str, Any]) -> str | None:
    """The count behind a space wait, from the filesystem's own probes: btrfs's reservation
    tickets, XFS's log space (grant head) sleeps."""
    btrfs = ((fs.get("behind") or {}).get("btrfs") or {}).get("all", {}).get("reservations")
    if btrfs and btrfs.get("tickets"):
        return f"{btrfs['tickets']:,} btrfs reservation tickets"
    xfs = ((fs.get("behind") or {}).get("xfs") or {}).get("all", {}).get("log_space")
    if xfs and xfs.get("sleeps"):
        return f"{xfs['sleeps']:,} XFS log space waits"
    return None


def space_note(fs: dict[str, Any]) -> str | None:
    """The sentence on a filesystem small (under SMALL_FILESYSTEM) or more than half full at the
    end, whose waits for space can be the test bed's; None for one that is neither."""
    space = fs.get("space") or {}
    size, used = space.get("size_bytes"), space.get("used_bytes_end")
    if not size or used is None or (size >= SMALL_FILESYSTEM and used <= size / 2):
        return None
    figure = space_figure(fs)
    return (
        f"a {size / (1 << 30):.1f} GiB filesystem, {used / size:.0%} full at the end"
        + (f" ({figure})" if figure else "")
        + ": waits for space (reservation tickets, log or allocation-group space) grow as a filesystem "
        "gets small or full; the scratch image's size (`--image-size`) can make this difference, not "
        "the filesystem alone."
    )


def waits_for_space(fs: dict[str, Any]) -> bool:
    """Whether a space cause took SPACE_SHARE or more of some op's time in this run."""
    return any(
        ns >= SPACE_SHARE * b["wall_ns"] > 0
        for b in fs.get("attribution", {}).values()
        for cause, ns in b.get("causes", {}).items()
        if any(w in cause for w in SPACE_CAUSE_WORDS)
    )
