"""Running fsprof on other kernels in VMs: `vm` boots one kernel and runs one command there,
`matrix` runs fsprof's checks on every kernel (`make test-kernels`). See docs/kernels.md."""
