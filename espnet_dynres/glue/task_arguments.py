"""The options ``batch_type: dynres`` adds to ESPnet's ASR parser (YAML keys = argument names)."""

from __future__ import annotations

import argparse
from typing import Callable

SAMPLER_ARGUMENTS = {
    "oversized": dict(
        type=str, default=None, choices=["warn", "error"],
        help="batch_type dynres: an utterance over batch_bins even at fallback_frame_rate_hz gets a batch of its "
             "own and a warning naming it (warn, the default) or stops training (error)"),
    "batch_fill": dict(
        type=str, default=None, choices=["below", "nearest"],
        help="batch_type dynres: a batch closes below batch_bins at the batch rule's frame count (below, the "
             "default) or nearest to it (nearest: an utterance that overshoots by less than the room left without "
             "it joins and the batch's frame count is lowered to batch_bins // B inside the rate clamp)"),
    "shuffle_jitter": dict(
        type=float, default=None,
        help="batch_type dynres: width of the per-epoch random perturbation of log-duration, as a fraction of "
             "log(max_frame_rate_hz / min_frame_rate_hz) (default 0.5; 0 = sorted, the same batches every epoch)"),
}


# ESPnet's batch-size bounds (in its parser from release 202509 on), added where an older release lacks them.
BATCH_SIZE_ARGUMENTS = {
    "max_batch_size": dict(type=int, default=None, help="batch_type dynres: most utterances per batch"),
    "min_batch_size": dict(type=int, default=1, help="batch_type dynres: fewest utterances per batch"),
}


def add_task_arguments(original: Callable, cls, parser: argparse.ArgumentParser) -> None:
    """ESPnet's ASR task arguments (``original``) plus :data:`SAMPLER_ARGUMENTS` and, where missing,
    :data:`BATCH_SIZE_ARGUMENTS`."""
    original(cls, parser)
    group = parser.add_argument_group("espnet_dynres: batch_type dynres")
    for name, options in SAMPLER_ARGUMENTS.items():
        group.add_argument(f"--{name}", **options)
    for name, options in BATCH_SIZE_ARGUMENTS.items():
        if f"--{name}" not in parser._option_string_actions:  # argparse's table of option strings
            group.add_argument(f"--{name}", **options)
