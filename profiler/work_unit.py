"""The unit of work a comparison counts calls per (a transaction, a file): `--unit NAME[=N]`
on the command line, `unit` of a spec's workload, or a bundled workload's own UNIT. One parser
for all three, so that a unit that does not parse is the same sentence wherever it was written."""

from dataclasses import dataclass

from .errors import FsprofError


@dataclass(frozen=True)
class Unit:
    """A unit of work: its name and, per side, how many the workload did (None: not known)."""

    name: str
    count: float | None = None


def parse_unit(text: str | None, where: str = "--unit") -> Unit:
    """`transaction=1000` (a count the user knows) or `transaction` (from the workload's own
    RESULT lines, `RESULT transactions=N`); one sentence, naming `where` it was written, if it is
    neither."""
    name, sep, count = (text or "").partition("=")
    name = name.strip()
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise FsprofError(f"{where} {text!r}: give a name and optionally a count, e.g. transaction=1000", exit_code=2)
    if not sep:
        return Unit(name)
    try:
        n = float(count)
    except ValueError:
        n = 0
    if not n > 0:
        raise FsprofError(f"{where} {text!r}: the count after '=' must be a positive number", exit_code=2)
    return Unit(name, n)
