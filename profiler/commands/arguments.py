"""Argument types the subcommands share: each turns bad input into argparse's one-sentence error."""

import argparse

from .. import units
from ..errors import FsprofError
from ..machine import device_model
from ..machine.device_model import DeviceModel
from ..trace.maps import EXEMPLARS


STACK_SAMPLE_HELP = (
    "walk off-CPU and waker stacks in 1 of N calls of each syscall once 64 of its waits have "
    "been, and divide the other calls' shorter waits in the walked calls' proportions; a wait "
    "of --tail-threshold or longer keeps its own stacks in every call, and the report says how "
    "much is estimated (default 8; 1: every call, the lab mode)"
)


TAIL_THRESHOLD_HELP = (
    "a syscall's wait this long or longer (e.g. 500us, 2ms) keeps its own off-CPU and waker "
    "stacks in every call, never estimated (default 1ms; moot with --stack-sample 1)"
)


EXEMPLARS_HELP = f"keep the K slowest calls of each syscall whole (1-{EXEMPLARS}, default {EXEMPLARS})"


def exemplar_count(text: str) -> int:
    """How many slowest calls to keep whole: 1..EXEMPLARS (the kernel's set holds that many)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= EXEMPLARS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a count of calls from 1 to {EXEMPLARS}")
    return value


def duration_ns(text: str) -> int:
    """A positive duration ('2ms', '500us', '1s') in ns."""
    try:
        return round(units.parse_duration(text) * 1e9)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive duration (e.g. 500us, 2ms)")


def size(text: str) -> int:
    try:
        return units.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def sample_hz(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    try:
        with open("/proc/sys/kernel/perf_event_max_sample_rate") as f:
            limit = int(f.read())
    except (OSError, ValueError):
        limit = 100000
    if not 0 <= value <= limit:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a sampling rate from 0 (off) to {limit} Hz (kernel.perf_event_max_sample_rate)"
        )
    return value


def pid(text: str) -> int:
    value = positive(text)
    if value > 1 << 22:  # PID_MAX_LIMIT
        raise argparse.ArgumentTypeError(f"'{text}' is not a process id")
    return value


def device_model_arg(text: str) -> DeviceModel:
    """--device-model: a model's name or its delays (profiler/machine/device_model.py)."""
    try:
        return device_model.parse(text)
    except FsprofError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive whole number")
    return value
