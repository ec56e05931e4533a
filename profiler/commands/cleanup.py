"""`fsprof cleanup`: undo what a killed run left. Every command as root does this first (cli.py),
so this one has nothing more to do."""

NEEDS_ROOT = True


def add_arguments(p):
    pass


def main(args):
    return 0
