"""`fsprof cleanup`: undo what a killed run left. Every command as root does this first (cli.py),
so this one has nothing more to do."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

NEEDS_ROOT = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def main(args: argparse.Namespace) -> int:
    return 0
