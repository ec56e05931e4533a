"""What fsprof changes or reads on the machine: scratch devices and filesystems (scratch.py), sysctls and
block queue settings (settings.py), the undo journal of every change (undo.py), the external tools it runs
(tools.py), spec matrices, workloads and their gated launch, /sys/block, mounts, tracefs."""
