"""What fsprof changes or reads on the machine: scratch devices and filesystems with the undo journal
(scratch.py), spec matrices, workloads and their gated launch, /sys/block, mounts, tracefs."""
