"""Readers of a run directory (rundir.load): the terminal report, compare, flame graphs and the
HTML report (html/). They never touch the kernel."""
