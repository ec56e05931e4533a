"""fsprof's command line: a table of subcommands, each a module of profiler/commands/ (HELP,
add_arguments, main). Every failure a user can cause ends in one sentence and a non-zero exit."""

import argparse
import faulthandler
import importlib
import os
import signal
import sys
from types import ModuleType
from typing import NoReturn

from . import __version__, signals
from .errors import FsprofError
from .machine import undo
from .trace.libbpf import check_privileges

# The subcommands: name (its module in profiler/commands/) -> what `fsprof --help` says of it.
COMMANDS = {
    "run": "run a workload on scratch filesystems under tracing",
    "record": "attach to a live process, cgroup or mount (changes nothing)",
    "report": "show a recorded run",
    "compare": "explain why runs of one workload differ (the first is the base)",
    "flamegraph": "flame graphs of a recorded run: folded stacks, and SVG by inferno",
    "timeline": "a recorded run's slowest calls, their waits and the work that ended them, for Perfetto",
    "verify": "check that barrier, writeback, journal and mount settings took effect, from what the kernel did",
    "doctor": "what this kernel supports and what fsprof can therefore do",
    "cleanup": "undo what a killed fsprof run left behind",
    "phase": "from inside `fsprof run -- CMD`: a phase named NAME begins now",
}


def command_module(name: str) -> ModuleType:
    """Only the chosen command's module is imported: importing all of them (the BPF loader, every
    behind module, the HTML views) took `fsprof report` and `fsprof --help` from 0.15 s to 0.40 s
    here, paid at every invocation."""
    return importlib.import_module(f"{__package__}.commands.{name}")


class Parser(argparse.ArgumentParser):
    """Usage errors in one sentence, as every other error: `--help` has the full usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"fsprof: {message} (see `{self.prog} --help`)\n")


def parser(argv: list[str]) -> Parser:
    """The parser with every subcommand listed, and the options of the one argv names."""
    ap = Parser(prog="fsprof", description="Kernel-tracing filesystem profiler.")
    ap.add_argument("--version", action="version", version=f"fsprof {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=Parser)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name in COMMANDS:
        if name != chosen:
            sub.add_parser(name, help=COMMANDS[name])
            continue
        mod = command_module(name)
        takes_unknown = getattr(mod, "TAKES_UNKNOWN_OPTIONS", False)
        # A command that hands unknown options on must not take an abbreviation of one as its own.
        p = sub.add_parser(
            name,
            help=COMMANDS[name],
            usage=getattr(mod, "USAGE", None),
            epilog=getattr(mod, "EPILOG", None),
            allow_abbrev=not takes_unknown,
        )
        mod.add_arguments(p)
    return ap


def parse(argv: list[str] | None) -> argparse.Namespace:
    """`run` takes options it does not know as the workload's own, and `-- CMD ARGS` as the
    user's command; every other command is parsed strictly."""
    argv = list(sys.argv[1:] if argv is None else argv)
    has_command = "--" in argv
    command = argv[argv.index("--") + 1 :] if has_command else []
    before = argv[: argv.index("--")] if has_command else argv
    ap = parser(before)
    args, rest = ap.parse_known_args(before)
    if rest and args.command in before and before.index(args.command) > before.index(rest[0]):
        ap.error(f"unrecognized arguments: {rest[0]} (fsprof's own options come after the command)")
    mod = command_module(args.command)
    if not getattr(mod, "TAKES_UNKNOWN_OPTIONS", False) and (rest or has_command):
        ap.error(f"unrecognized arguments: {' '.join(rest + (['--', *command] if has_command else []))}")
    if has_command and not command:
        ap.error("nothing follows `--`; give the command to run")
    if hasattr(mod, "check_arguments"):
        mod.check_arguments(ap, args, rest, command if has_command else None)
    args.workload_args, args.command_argv = rest, command
    return args


def dispatch(args: argparse.Namespace) -> int:
    mod = command_module(args.command)
    if os.geteuid() == 0 and not getattr(mod, "INSIDE_A_RUN", False):
        for sentence in undo.cleanup_stale():  # whatever the command: a dead run's mounts and sysctls go first
            print(f"fsprof: cleaned up after a dead run: {sentence}", file=sys.stderr)
    if mod.NEEDS_ROOT:
        check_privileges()
        signals.install_handlers()
    return mod.main(args)


def main(argv: list[str] | None = None) -> int:
    # `kill -USR1 PID` prints where every thread of a stuck fsprof is, on its stderr.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    args = parse(argv)
    try:
        return dispatch(args)
    except FsprofError as e:
        print(f"fsprof: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("fsprof: interrupted; everything fsprof set up was undone", file=sys.stderr)
        return 130
    except OSError as e:
        # The machine said no (a path, a permission): one sentence, as for any other bad input.
        where = f": {e.filename}" if e.filename else ""
        print(f"fsprof: {e.strerror or e}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
