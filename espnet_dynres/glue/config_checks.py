"""Checks of settings (YAML keys and their combinations), each failing with a message that names the key and the fix.

Every check raises ``ValueError`` except :func:`check_conf_keys` (``TypeError``, as for an unexpected keyword)."""

from __future__ import annotations

import argparse
import difflib
import functools
import inspect
import logging
import warnings
from typing import Callable, Iterable, Mapping, Optional, Set

from espnet_dynres.asr.dynres_model import DynResASRModel
from espnet_dynres.glue.plugin_switches import dynres_switches, plugin_switches_on
from espnet_dynres.glue.task_arguments import SAMPLER_ARGUMENTS


def closest_key(key: str, valid: Iterable[str]) -> Optional[str]:
    """The valid key most similar to ``key`` (``difflib``), or ``None`` if none is close."""
    matches = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return matches[0] if matches else None


def accepted_keywords(cls: type) -> Optional[Set[str]]:
    """Keyword names ``cls(...)`` accepts, following ``**kwargs`` up the MRO; ``None`` if open-ended."""
    names: Set[str] = set()
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            return names
    return None


# Keys of earlier plugin versions: what replaced them, for the error message.
REPLACED_KEYS = {"batchnorm_restat_utts": (
    "batchnorm_restat_batches", "the re-estimate's sample is a budget in evaluation batches (its total standard "
    "frames or input elements at most that many times valid_batch_bins, else batch_bins), no longer a count of "
    "utterances; 0 still turns it off")}


def check_conf_keys(conf: Optional[Mapping], cls: type, conf_name: str) -> None:
    """Every key of ``conf`` is an argument of ``cls``.

    Raises:
        TypeError: an unknown key, with the closest valid key (or its :data:`REPLACED_KEYS` entry) and the valid ones.
    """
    valid = accepted_keywords(cls)
    if not conf or valid is None:
        return
    for key in conf:
        if key in REPLACED_KEYS and key not in valid and REPLACED_KEYS[key][0] in valid:
            new_key, why = REPLACED_KEYS[key]
            raise TypeError(f"{conf_name} key {key!r} was replaced by {new_key!r}: {why}.")
        if key not in valid:
            guess = closest_key(key, valid)
            hint = f"did you mean {guess!r}? " if guess else ""
            raise TypeError(f"{conf_name} has an unknown key {key!r} for {cls.__name__}; {hint}"
                            f"valid keys: {', '.join(sorted(valid))}.")


def check_task_conf_keys(task: type, args: argparse.Namespace) -> None:
    """:func:`check_conf_keys` (raising its ``TypeError``) for every ``--<name>`` / ``--<name>_conf`` pair of a task."""
    for choices in task.class_choices_list:
        chosen = getattr(args, choices.name, None)
        if chosen is None:
            continue
        if choices.name == "frontend" and getattr(args, "input_size", None) is not None:
            continue  # extracted features: ESPnet builds no frontend and ignores frontend_conf
        check_conf_keys(getattr(args, f"{choices.name}_conf", None), choices.get_class(chosen), f"{choices.name}_conf")


def with_conf_key_check(build_model: Callable) -> Callable:
    """Wrap ``build_model(cls, args)``: with a plugin switch on, the conf-key and grad_clip checks run first."""

    @functools.wraps(build_model)
    def checked(cls, args: argparse.Namespace):
        if not plugin_switches_on(args):
            return build_model(cls, args)
        check_task_conf_keys(cls, args)
        check_token_normalized_grad_clip(args)
        return build_model(cls, args)

    return checked


TOKEN_NORMALIZED_MAX_GRAD_CLIP = 1.0


class GradClipWarning(UserWarning):
    """``grad_clip`` too high (or off) for the per-token loss of ``model: token_normalized``."""


def check_token_normalized_grad_clip(args: argparse.Namespace) -> bool:
    """Warn (``GradClipWarning``) if ``model: token_normalized`` has ``grad_clip`` > 1 or off (fix: 1); returns it."""
    if getattr(args, "model", None) != "token_normalized" or getattr(args, "collect_stats", False):
        return False
    grad_clip = float(getattr(args, "grad_clip", 5.0))
    if 0 < grad_clip <= TOKEN_NORMALIZED_MAX_GRAD_CLIP:
        return False
    setting = "off" if grad_clip <= 0 else f"{grad_clip:g}"
    message = (f"model: token_normalized with grad_clip {setting}: the per-token loss's gradient norm is about 1 "
               "(ESPnet's per-utterance loss: 5-100), so clipping at this level acts only on the first steps and "
               "Adam then takes several-fold smaller steps (docs/loss_normalization.md). "
               f"Set grad_clip: {TOKEN_NORMALIZED_MAX_GRAD_CLIP:g} (or lower).")
    logging.warning(message)
    warnings.warn(message, GradClipWarning, stacklevel=2)
    return True


def check_sampler_arguments(args: argparse.Namespace) -> None:
    """Refuse options that the chosen iterator or model would silently ignore.

    Raises:
        ValueError: a :data:`SAMPLER_ARGUMENTS` option, ``curriculum_epochs`` or ``target_frame_rate_range_hz``
            without ``batch_type: dynres``, or that with an ``iterator_type`` other than ``sequence``; and the
            errors of :func:`check_model`, :func:`check_raw_audio_switches`, :func:`check_frontend_pairing`.
    """
    dynres = "dynres" in (getattr(args, "batch_type", None), getattr(args, "valid_batch_type", None))
    for name in SAMPLER_ARGUMENTS:
        if getattr(args, name, None) is not None and not dynres:
            raise ValueError(f"{name}: {getattr(args, name)} applies to batch_type dynres only, but batch_type is "
                             f"{getattr(args, 'batch_type', None)!r}; remove {name} or set batch_type: dynres.")
    for key in ("iterator_type", "valid_iterator_type"):
        kind = getattr(args, key, None)
        if dynres and kind not in (None, "sequence"):
            raise ValueError(
                f"batch_type dynres needs {key}: sequence (ESPnet's {kind!r} iterator does not use a batch "
                f"sampler, so the dynres plan would be ignored); got {key}: {kind}.")
    check_model(args)
    check_raw_audio_switches(args)
    curriculum = (getattr(args, "frontend_conf", None) or {}).get("curriculum_epochs", 0) or 0
    if getattr(args, "frontend", None) == "dynres" and curriculum > 0 and getattr(args, "batch_type", None) != "dynres":
        raise ValueError(
            f"frontend_conf curriculum_epochs: {curriculum} is applied by the dynres sampler's plan, but batch_type "
            f"is {getattr(args, 'batch_type', None)!r}; set batch_type: dynres or remove curriculum_epochs.")
    check_frontend_pairing(args)
    drawn = (getattr(args, "frontend_conf", None) or {}).get("target_frame_rate_range_hz")
    if getattr(args, "frontend", None) == "dynres" and drawn is not None \
            and getattr(args, "batch_type", None) != "dynres":
        raise ValueError(
            f"frontend_conf target_frame_rate_range_hz: {drawn} is drawn per batch by the dynres sampler's plan, but "
            f"batch_type is {getattr(args, 'batch_type', None)!r}; set batch_type: dynres or remove "
            "target_frame_rate_range_hz.")


class SpecAugFrameRateWarning(UserWarning):
    """``specaug: specaug`` beside ``frontend: dynres``: time masks and warps in frames, not seconds."""


def check_frontend_pairing(args: argparse.Namespace) -> None:
    """The dynres sampler's plan needs the dynres frontend; the dynres frontend wants ``specaug: dynres``.

    Raises:
        ValueError: ``batch_type`` or ``valid_batch_type`` ``dynres`` with another frontend on raw audio (with fix).

    Warns:
        SpecAugFrameRateWarning: ``specaug: specaug`` warps or masks in frames (fix: ``specaug: dynres``).
    """
    frontend = getattr(args, "frontend", None)
    if getattr(args, "input_size", None) is not None:
        return  # extracted features: check_raw_audio_switches names the switches
    for key in ("batch_type", "valid_batch_type"):
        if getattr(args, key, None) == "dynres" and frontend != "dynres":
            raise ValueError(
                f"{key}: dynres plans a frame rate for every utterance, which only frontend: dynres computes; "
                f"got frontend: {frontend}. Set frontend: dynres (it takes DefaultFrontend's frontend_conf keys, "
                "which mean the same), or use ESPnet's batch_type: numel.")
    conf = getattr(args, "specaug_conf", None) or {}
    in_frames = [k for k in ("apply_time_warp", "time_mask_width_range")
                 if (conf.get(k, True) if k == "apply_time_warp" else conf.get(k) is not None)]
    if frontend == "dynres" and getattr(args, "specaug", None) == "specaug" and in_frames:
        warnings.warn(
            "frontend: dynres gives utterances different frame rates, but specaug: specaug counts "
            f"{' and '.join(in_frames)} in frames (ESPnet's apply_time_warp defaults to true), so they cover "
            "different durations at each rate; set specaug: dynres (the same specaug_conf keys, masks and warps "
            "kept in seconds).", SpecAugFrameRateWarning, stacklevel=2)


def check_raw_audio_switches(args: argparse.Namespace) -> None:
    """``batch_type: dynres`` and ``frontend: dynres`` need raw audio: refuse extracted features (``input_size`` set).

    Raises:
        ValueError: naming the switch, ``input_size`` and the fixes (raw audio, or ``batch_type: numel``).
    """
    input_size = getattr(args, "input_size", None)
    if input_size is None:
        return
    switches = dynres_switches(args)
    if switches:
        raise ValueError(
            f"{', '.join(switches)} computes features at a per-utterance frame rate from raw audio, but "
            f"input_size: {input_size} means extracted features (asr.sh --feats_type extracted/fbank_pitch), for "
            "which ESPnet builds no frontend. Train on raw audio (asr.sh --feats_type raw) with the dynres "
            "switches, or keep the features and use batch_type: numel and frontend: null (model: "
            "token_normalized and its BatchNorm re-estimate work on features).")


def check_model(args: argparse.Namespace) -> None:
    """``batch_type``, ``frontend`` or ``specaug`` ``dynres`` need a :class:`DynResASRModel` (it passes plan and rates).

    Raises:
        ValueError: naming the switches and the two models to choose from.
    """
    switches = dynres_switches(args, ("batch_type", "frontend", "specaug"))
    name = getattr(args, "model", None)
    if not switches or name is None:
        return
    from espnet2.tasks import asr as espnet_asr  # noqa: PLC0415 (ESPnet's task imports every model)
    model_class = espnet_asr.model_choices.classes.get(name.lower())  # ESPnet's choices are case-insensitive
    if model_class is None or not issubclass(model_class, DynResASRModel):
        raise ValueError(
            f"{', '.join(switches)} needs model: dynres (ESPnet's loss) or model: token_normalized (per-token "
            f"loss), which pass the sampler's plan to the frontend and the frame rates to SpecAugment; got "
            f"model: {name}.")
