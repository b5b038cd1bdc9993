"""The plugin's YAML switches, and which of them a configuration turns on (no imports: every module may use it)."""

from __future__ import annotations

import argparse
from typing import List, Sequence

PLUGIN_SWITCHES = {"batch_type": ("dynres",), "valid_batch_type": ("dynres",), "frontend": ("dynres",),
                   "specaug": ("dynres",), "model": ("dynres", "token_normalized")}


def plugin_switches_on(args: argparse.Namespace) -> List[str]:
    """The plugin's switches set in ``args`` (``["batch_type: dynres", ...]``); empty for stock ESPnet."""
    return [f"{key}: {getattr(args, key)}" for key, values in PLUGIN_SWITCHES.items()
            if getattr(args, key, None) in values]


# The switches that compute features from raw audio at a per-utterance frame rate.
RAW_AUDIO_SWITCHES = ("batch_type", "valid_batch_type", "frontend")


def dynres_switches(args: argparse.Namespace, keys: Sequence[str] = RAW_AUDIO_SWITCHES) -> List[str]:
    """Those of ``keys`` set to ``dynres`` in ``args``, as ``["batch_type: dynres", ...]`` (for messages)."""
    return [f"{key}: dynres" for key in keys if getattr(args, key, None) == "dynres"]
