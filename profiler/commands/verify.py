"""`fsprof verify`: did the settings take effect? Its options and command live with the checks in
profiler/verify/, which `fsprof run` also calls."""

from ..verify import add_arguments, command as main

__all__ = ["add_arguments", "main", "NEEDS_ROOT"]  # this command's interface, defined with the checks

NEEDS_ROOT = False  # it checks privileges itself, once its arguments are known to be good
