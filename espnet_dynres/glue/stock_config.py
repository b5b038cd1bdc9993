"""A trained model's ``config.yaml`` rewritten for stock ESPnet: decoding without the plugin (weights load unchanged).

The result is an *inference* config: its ``batch_bins`` (feature frames) would mean samples under ``numel``."""

from __future__ import annotations

import copy
from typing import Dict, Iterable, Mapping

from espnet_dynres.glue.config_checks import accepted_keywords

# The plugin's names and ESPnet's for the same thing at inference.
STOCK_NAMES = {"frontend": {"dynres": "default"}, "specaug": {"dynres": "specaug"},
               "model": {"dynres": "espnet", "token_normalized": "espnet"}, "batch_type": {"dynres": "numel"},
               "valid_batch_type": {"dynres": "numel"}}
PLUGIN_ONLY_KEYS = ("oversized", "batch_fill", "shuffle_jitter")  # keys only the plugin's parser and classes know
PLUGIN_ONLY_MODEL_CONF = ("batchnorm_restat_batches",)


def _kept(conf: Mapping, keys: Iterable[str]) -> Dict:
    keys = set(keys)
    return {k: v for k, v in (conf or {}).items() if k in keys}


def stock_espnet_config(config: Mapping) -> Dict:
    """``config`` (a training run's ``config.yaml`` as a dict) with ESPnet's names and keys only (a copy).

    Raises:
        ValueError: ``config`` is not a mapping with a ``model`` key (not a training config).
    """
    from espnet2.asr.frontend.default import DefaultFrontend
    from espnet2.asr.specaug.specaug import SpecAug
    if not isinstance(config, Mapping) or "model" not in config:
        raise ValueError("expected a training run's config.yaml (a mapping with a 'model' key)")
    out = copy.deepcopy(dict(config))
    for key, names in STOCK_NAMES.items():
        if out.get(key) in names:
            out[key] = names[out[key]]
    if config.get("frontend") == "dynres":
        out["frontend_conf"] = _kept(config.get("frontend_conf"), accepted_keywords(DefaultFrontend))
    if config.get("specaug") == "dynres":
        out["specaug_conf"] = _kept(config.get("specaug_conf"), accepted_keywords(SpecAug))
    if "model_conf" in out and out["model_conf"]:
        out["model_conf"] = {k: v for k, v in out["model_conf"].items() if k not in PLUGIN_ONLY_MODEL_CONF}
    for key in PLUGIN_ONLY_KEYS:
        out.pop(key, None)
    return out
