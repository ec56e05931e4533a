"""Signals: Ctrl-C, SIGTERM and SIGHUP unwind fsprof (so every `with` undoes what it set up), and
are held back, not lost, while an undo or a detach is in progress."""

import contextlib
import signal
from collections.abc import Iterator

DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def install_handlers() -> None:
    """Make SIGTERM and SIGHUP raise SystemExit(128+signo) as SIGINT raises KeyboardInterrupt.
    A signal fsprof was started with ignored stays ignored, as Python leaves SIGINT: `nohup`
    ignores SIGHUP so that a recording outlives its terminal, and a shell starts background jobs
    with SIGINT ignored so that Ctrl-C does not reach them."""

    def _exit(signo, _frame):
        raise SystemExit(128 + signo)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _exit)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Block the unwinding signals inside; one that arrives meanwhile is delivered on leaving.
    The mask is inherited by the umount/losetup children started inside, which matters because
    Ctrl-C reaches the whole foreground process group."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, DEFERRED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
