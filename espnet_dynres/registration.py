"""Everything espnet_dynres adds to ESPnet, in one place.

``import espnet_dynres`` calls :func:`register`, which adds:

=================  ======================  ==============================================
ESPnet switch      name                    what it is
=================  ======================  ==============================================
``frontend``       ``dynres``              :class:`~espnet_dynres.asr.frontend.dynres.DynResFrontend`
``specaug``        ``dynres``              :class:`~espnet_dynres.asr.specaug.dynres_specaug.DynResSpecAug`
``model``          ``dynres``              :class:`~espnet_dynres.asr.dynres_model.DynResASRModel` (ESPnet's loss)
``model``          ``token_normalized``    :class:`~espnet_dynres.asr.token_normalized_model.TokenNormalizedASRModel`
``batch_type``     ``dynres``              :class:`~espnet_dynres.samplers.dynres_batch_sampler.DynResBatchSampler`
=================  ======================  ==============================================

adds the dynres sampler's options to ESPnet's parser (``--oversized``,
``--shuffle_jitter``, ``--batch_fill``: :data:`SAMPLER_ARGUMENTS`, refused with another batch type),
and wraps two ESPnet methods.  Their checks run only when one of the
plugin's switches is on (:func:`espnet_dynres.input_checks.plugin_switches_on`):
a stock configuration goes straight to ESPnet's code.  ``ASRTask.build_model`` first checks every
``*_conf`` for unknown keys (a typo gets the closest valid key,
:func:`espnet_dynres.input_checks.check_task_conf_keys`) and warns when
``model: token_normalized`` runs with ``grad_clip`` above 1
(:func:`espnet_dynres.input_checks.check_token_normalized_grad_clip`).  ``ASRTask.build_sequence_iter_factory``
(0) checks the data against the shape files (blank lines, keys), too-short and
(with ``frontend: dynres``) multi-channel utterances, and names empty
transcripts in a warning (:func:`espnet_dynres.input_checks.check_training_data`);
(1) with ``frontend: dynres``, checks that the audio's sampling rate equals
``frontend_conf.fs``; (2) for ``batch_type`` (or ``valid_batch_type``)
``dynres`` builds the ``dynres`` sampler (with CTC safety from the
transcripts) and :class:`~espnet_dynres.iterators.dynres_iter_factory.DynResIterFactory`
(a fresh plan every epoch, DDP split, the plan passed as batch key
``speech_frames``, the argument of ``model: dynres``); every other batch type goes to
ESPnet's own method.  ``batch_type``, ``frontend`` and ``specaug`` ``dynres`` need
``model: dynres`` or ``token_normalized`` (:func:`check_model`).
"""

from __future__ import annotations

import argparse
import inspect
import logging

from typing import Dict, Optional

import numpy as np
import soundfile
import torch

from espnet2.samplers.build_batch_sampler import BATCH_TYPES
from espnet2.tasks import asr as espnet_asr
from espnet2.tasks.abs_task import AbsTask, IteratorOptions

from espnet_dynres import input_checks
from espnet_dynres.asr.batchnorm_restat import RestatBudget
from espnet_dynres.batch_audit import numel_sized_budget
from espnet_dynres.asr.dynres_model import DynResASRModel
from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.asr.specaug.dynres_specaug import DynResSpecAug
from espnet_dynres.asr.token_normalized_model import TokenNormalizedASRModel
from espnet_dynres.ctc_feasibility import ctc_frames_needed, min_feature_frames
from espnet_dynres.frame_rate_policy import FrameRatePolicy
from espnet_dynres.iterators.dynres_iter_factory import DynResIterFactory
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler

FRONTENDS = {"dynres": DynResFrontend}
SPECAUGS = {"dynres": DynResSpecAug}
MODELS = {"dynres": DynResASRModel, "token_normalized": TokenNormalizedASRModel}
BATCH_TYPE_DOCS = {
    "dynres": (
        "Dynamic-resolution batches (espnet_dynres): utterances grouped by duration "
        "so that the dynres frontend brings all of them to one frame count T inside "
        "its frame-rate clamp; batch_bins is the frame budget B x T. "
        "Needs frontend: dynres."
    )
}

_ORIGINAL_BUILD_SEQUENCE_ITER_FACTORY = AbsTask.build_sequence_iter_factory.__func__
_ORIGINAL_BUILD_MODEL = espnet_asr.ASRTask.build_model.__func__
_ORIGINAL_ADD_TASK_ARGUMENTS = espnet_asr.ASRTask.add_task_arguments.__func__

# Options of the dynres sampler that ESPnet has no argument for; YAML keys = argument names.
SAMPLER_ARGUMENTS = {
    "oversized": dict(
        type=str, default=None, choices=["warn", "error"],
        help="batch_type dynres: an utterance over batch_bins even at fallback_frame_rate_hz gets a batch of its "
             "own and a warning naming it (warn, the default) or stops training (error)",
    ),
    "batch_fill": dict(
        type=str, default=None, choices=["below", "nearest"],
        help="batch_type dynres: a batch closes below batch_bins at the batch rule's frame count (below, the "
             "default) or nearest to it (nearest: an utterance that overshoots by less than the room left without "
             "it joins and the batch's frame count is lowered to batch_bins // B inside the rate clamp)",
    ),
    "shuffle_jitter": dict(
        type=float, default=None,
        help="batch_type dynres: width of the per-epoch random perturbation of log-duration, as a fraction of "
             "log(max_frame_rate_hz / min_frame_rate_hz) (default 0.5; 0 = sorted, the same batches every epoch)",
    ),
}


# ESPnet's batch-size bounds, which ESPnet's parser has from release 202509 on; added with the same
# meaning and defaults where an older release lacks them, so the dynres sampler reads them on every
# supported release.
BATCH_SIZE_ARGUMENTS = {
    "max_batch_size": dict(type=int, default=None, help="batch_type dynres: most utterances per batch"),
    "min_batch_size": dict(type=int, default=1, help="batch_type dynres: fewest utterances per batch"),
}


def add_task_arguments(cls, parser: argparse.ArgumentParser) -> None:
    """ESPnet's ASR task arguments plus the dynres sampler's (:data:`SAMPLER_ARGUMENTS`, and
    :data:`BATCH_SIZE_ARGUMENTS` where the installed ESPnet has none)."""
    _ORIGINAL_ADD_TASK_ARGUMENTS(cls, parser)
    group = parser.add_argument_group("espnet_dynres: batch_type dynres")
    for name, options in SAMPLER_ARGUMENTS.items():
        group.add_argument(f"--{name}", **options)
    for name, options in BATCH_SIZE_ARGUMENTS.items():
        if f"--{name}" not in parser._option_string_actions:  # argparse's table of option strings
            group.add_argument(f"--{name}", **options)


def check_sampler_arguments(args: argparse.Namespace) -> None:
    """Refuse options that the chosen iterator or model would silently ignore.

    Raises:
        ValueError: a :data:`SAMPLER_ARGUMENTS` option set without ``batch_type``
            or ``valid_batch_type`` ``dynres``; ``batch_type: dynres`` with an
            ``iterator_type`` other than ``sequence`` (only ESPnet's sequence
            iterator uses a batch sampler); ``batch_type``, ``frontend`` or
            ``specaug`` ``dynres`` with a model that does not pass the plan and
            the frame rates (:func:`check_model`); ``frontend_conf.curriculum_epochs``
            without ``batch_type: dynres`` (the curriculum is part of the sampler's plan).
    """
    dynres = "dynres" in (getattr(args, "batch_type", None), getattr(args, "valid_batch_type", None))
    for name in SAMPLER_ARGUMENTS:
        if getattr(args, name, None) is not None and not dynres:
            raise ValueError(
                f"{name}: {getattr(args, name)} applies to batch_type dynres only, but batch_type is "
                f"{getattr(args, 'batch_type', None)!r}; remove {name} or set batch_type: dynres."
            )
    for key in ("iterator_type", "valid_iterator_type"):
        kind = getattr(args, key, None)
        if dynres and kind not in (None, "sequence"):
            raise ValueError(
                f"batch_type dynres needs {key}: sequence (ESPnet's {kind!r} iterator does not use a batch "
                f"sampler, so the dynres plan would be ignored); got {key}: {kind}."
            )
    check_model(args)
    check_raw_audio_switches(args)
    curriculum = (getattr(args, "frontend_conf", None) or {}).get("curriculum_epochs", 0) or 0
    if getattr(args, "frontend", None) == "dynres" and curriculum > 0 and getattr(args, "batch_type", None) != "dynres":
        raise ValueError(
            f"frontend_conf curriculum_epochs: {curriculum} is applied by the dynres sampler's plan, but batch_type "
            f"is {getattr(args, 'batch_type', None)!r}; set batch_type: dynres or remove curriculum_epochs."
        )


def check_raw_audio_switches(args: argparse.Namespace) -> None:
    """``batch_type: dynres`` and ``frontend: dynres`` need raw audio: refuse extracted features.

    With ``input_size`` set (``asr.sh --feats_type extracted`` or ``fbank_pitch`` passes it),
    ESPnet builds no frontend and feeds the features ``(B, T_frames, D)`` straight to the
    encoder, silently dropping ``frontend: dynres``; a dynres plan of frame rates then has
    nothing to act on.

    Raises:
        ValueError: naming the switch, ``input_size`` and the two fixes (raw audio, or
            ``batch_type: numel`` with ``model: token_normalized``, which works on features).
    """
    input_size = getattr(args, "input_size", None)
    if input_size is None:
        return
    switches = input_checks.dynres_switches(args)
    if switches:
        raise ValueError(
            f"{', '.join(switches)} computes features at a per-utterance frame rate from raw audio, but "
            f"input_size: {input_size} means extracted features (asr.sh --feats_type extracted/fbank_pitch), for "
            "which ESPnet builds no frontend. Train on raw audio (asr.sh --feats_type raw) with the dynres "
            "switches, or keep the features and use batch_type: numel and frontend: null (model: "
            "token_normalized and its BatchNorm re-estimate work on features)."
        )


def check_model(args: argparse.Namespace) -> None:
    """The dynres switches need a model that passes the plan and the rates as arguments.

    ``batch_type: dynres``, ``frontend: dynres`` and ``specaug: dynres`` need
    ``model: dynres`` (ESPnet's loss) or ``model: token_normalized`` (per-token
    loss), i.e. a :class:`DynResASRModel`: with ESPnet's ``model: espnet`` the
    frontend would never see the sampler's plan and SpecAugment never the rates.

    Raises:
        ValueError: naming the switches and the two models to choose from.
    """
    switches = input_checks.dynres_switches(args, ("batch_type", "frontend", "specaug"))
    name = getattr(args, "model", None)
    if not switches or name is None:
        return
    model_class = espnet_asr.model_choices.classes.get(name.lower())  # ESPnet's choices are case-insensitive
    if model_class is None or not issubclass(model_class, DynResASRModel):
        raise ValueError(
            f"{', '.join(switches)} needs model: dynres (ESPnet's loss) or model: token_normalized (per-token "
            f"loss), which pass the sampler's plan to the frontend and the frame rates to SpecAugment; got "
            f"model: {name}."
        )


def policy_from_args(args: argparse.Namespace) -> FrameRatePolicy:
    """The frontend's :class:`FrameRatePolicy`, built from ``args.frontend_conf``.

    Raises:
        ValueError: ``batch_type: dynres`` with a frontend other than ``dynres``.
        TypeError: unknown keys in ``frontend_conf`` (from the frontend itself).
    """
    frontend = getattr(args, "frontend", None)
    if frontend != "dynres":
        raise ValueError(
            f"batch_type: dynres plans frame counts for the dynres frontend, but frontend is "
            f"{frontend!r}; set frontend: dynres (or use another batch_type)."
        )
    return DynResFrontend(**(args.frontend_conf or {})).policy


def check_sampling_rate(args: argparse.Namespace, iter_options: IteratorOptions, files_to_check: int = 3) -> None:
    """Reject audio whose sampling rate differs from ``frontend_conf.fs`` (dynres frontend only).

    Reads the headers of the first ``files_to_check`` entries of each ``sound``
    data file (``utt_id path``).

    Raises:
        ValueError: naming the utterance, its rate, ``fs`` and the fix.
    """
    if getattr(args, "frontend", None) != "dynres":
        return
    fs = DynResFrontend(**(args.frontend_conf or {})).fs
    for path, _name, kind in iter_options.data_path_and_name_and_type:
        if kind != "sound":
            continue
        with open(path, encoding="utf-8") as f:
            for _, line in zip(range(files_to_check), f):
                utt, audio = line.rstrip("\n").split(maxsplit=1)
                rate = soundfile.info(audio).samplerate
                if rate != fs:
                    raise ValueError(
                        f"utterance {utt} ({audio}) is sampled at {rate} Hz but frontend_conf fs={fs}; "
                        f"resample the data to {fs} Hz (recipe stage 3, --fs) or set frontend_conf fs: {rate} "
                        "with matching n_fft/win_length/hop_length."
                    )


def ctc_min_frames(cls, args: argparse.Namespace, iter_options: IteratorOptions) -> Optional[Dict[str, int]]:
    """Fewest feature frames per training utterance for CTC to stay possible.

    ``min_feature_frames(U + R, input_layer)`` with ``U + R`` from the
    transcript as the model will see it (ESPnet's own preprocessor: cleaner,
    tokenizer, token list).  ``None`` when there is no CTC branch or no text.
    """
    model_conf = args.model_conf or {}
    if float(model_conf.get("ctc_weight", 0.5)) == 0.0 or not iter_options.train:
        return None
    texts = [p for p, name, _ in iter_options.data_path_and_name_and_type if name == "text"]
    if not texts:
        return None
    preprocess = cls.build_preprocess_fn(args, train=False)
    if preprocess is None:
        return None
    input_layer = (args.encoder_conf or {}).get("input_layer", "conv2d")
    need: Dict[str, int] = {}
    with open(texts[0], encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split(maxsplit=1)
            if not parts:
                continue
            ids = preprocess(parts[0], {"text": parts[1] if len(parts) > 1 else ""})["text"]
            need[parts[0]] = min_feature_frames(ctc_frames_needed(list(ids)), input_layer)
    return need


def build_sequence_iter_factory(cls, args: argparse.Namespace, iter_options: IteratorOptions, mode: str):
    """ESPnet's iterator factory, with the ``dynres`` sampler for ``batch_type: dynres``.

    For ``dynres``: a :class:`DynResBatchSampler` (redrawn every training
    epoch from ``(seed, epoch)``, fixed and sorted for validation; CTC safety
    from the transcripts; ``min_batch_size`` = world size under DDP) and a
    :class:`DynResIterFactory` (DDP split ``batch[rank::world_size]``, so
    ``batch_bins`` is the global budget as in ESPnet; the plan travels to the
    model as batch key ``speech_frames``).  Every other batch type goes to
    ESPnet's own method.

    Raises:
        ValueError: ``shuffle_within_batch: true`` (it would break the plan), a
            frontend other than ``dynres``, or audio at another sampling rate.
    """
    check_sampler_arguments(args)  # passes trivially for a stock configuration (the options are unset)
    if input_checks.plugin_switches_on(args):  # a stock configuration runs exactly as ESPnet's own
        check_sampling_rate(args, iter_options)
        input_checks.check_training_data(args, iter_options)
    if iter_options.batch_type != "dynres":
        return _ORIGINAL_BUILD_SEQUENCE_ITER_FACTORY(cls, args, iter_options, mode)
    if getattr(args, "shuffle_within_batch", False):
        raise ValueError(
            "shuffle_within_batch: true moves utterances between batches and breaks the dynres plan; "
            "batch_type dynres already redraws batch composition every epoch. Set shuffle_within_batch false."
        )
    distributed = iter_options.distributed
    world_size = torch.distributed.get_world_size() if distributed else 1
    rank = torch.distributed.get_rank() if distributed else 0
    optional = {name: getattr(args, name) for name in SAMPLER_ARGUMENTS if getattr(args, name, None) is not None}
    sampler = DynResBatchSampler(
        batch_bins=iter_options.batch_bins,
        shape_files=iter_options.shape_files,
        policy=policy_from_args(args),
        min_batch_size=world_size if distributed else getattr(args, "min_batch_size", 1),
        max_batch_size=getattr(args, "max_batch_size", None),
        sort_in_batch=args.sort_in_batch,
        sort_batch=args.sort_batch,
        drop_last=args.drop_last_iter,
        utt2min_frames=ctc_min_frames(cls, args, iter_options),
        seed=args.seed,
        shuffle=iter_options.train,
        **optional,
    )
    sizes = [len(b) for b in sampler.batches_for_epoch(1)]
    logging.info(f"[{mode}] Batch sampler: {sampler}")
    if iter_options.train:
        numel_sized = numel_sized_budget(sampler, iter_options.shape_files)
        if numel_sized:
            logging.warning(f"[{mode}] {numel_sized}")
    logging.info(
        f"[{mode}] mini-batch sizes summary (epoch 1): N-batch={len(sizes)}, "
        f"mean={np.mean(sizes):.1f}, min={np.min(sizes)}, max={np.max(sizes)}"
    )
    dataset = cls.build_dataset(args, iter_options, set(sampler.keys))
    return DynResIterFactory(
        dataset=dataset,
        sampler=sampler,
        train=iter_options.train,
        num_iters_per_epoch=iter_options.num_iters_per_epoch,
        num_batches=iter_options.num_batches,
        rank=rank,
        world_size=world_size,
        seed=args.seed,
        num_workers=args.num_workers,
        pin_memory=args.ngpu > 0,
        collate_fn=iter_options.collate_fn,
    )


_CHECKED_BUILD_MODEL = input_checks.with_conf_key_check(_ORIGINAL_BUILD_MODEL)


def build_model(cls, args: argparse.Namespace):
    """ESPnet's ``build_model`` after :func:`check_sampler_arguments` and, when a plugin switch is
    on, the conf-key and grad_clip checks (:func:`espnet_dynres.input_checks.with_conf_key_check`).
    Training builds the model before its iterators, so option conflicts stop it before any data is read.
    A :class:`DynResASRModel` gets the run's evaluation budget for its BatchNorm re-estimate
    (:meth:`RestatBudget.from_task_args`)."""
    check_sampler_arguments(args)
    model = _CHECKED_BUILD_MODEL(cls, args)
    if isinstance(model, DynResASRModel):
        frontend = model.frontend
        hop = frontend.hop_length if isinstance(frontend, DynResFrontend) else None
        model.batchnorm_restat_budget = RestatBudget.from_task_args(args, hop_length=hop)
    record_effective_options(args, model)
    return model


def record_effective_options(args: argparse.Namespace, model: torch.nn.Module) -> None:
    """Write the value every plugin option runs with into ``args``, which ESPnet saves as the run's
    ``config.yaml`` after building the model: the sampler options (:data:`SAMPLER_ARGUMENTS`, with
    ``batch_type`` or ``valid_batch_type`` ``dynres``; defaults from :class:`DynResBatchSampler`),
    the dynres frontend's own keys (the rate clamp from its :class:`FrameRatePolicy`, ``method``,
    ``resample_*``) and ``model_conf.batchnorm_restat_utts``.  An omitted option is then recorded
    as the value used, so a run stays reproducible from its config if a default changes."""
    if "dynres" in (getattr(args, "batch_type", None), getattr(args, "valid_batch_type", None)):
        defaults = inspect.signature(DynResBatchSampler.__init__).parameters
        for name in SAMPLER_ARGUMENTS:
            if getattr(args, name, None) is None:
                setattr(args, name, defaults[name].default)
    frontend = getattr(model, "frontend", None)
    if isinstance(frontend, DynResFrontend):
        policy = frontend.policy
        args.frontend_conf = {
            **(args.frontend_conf or {}),
            "min_frame_rate_hz": policy.min_frame_rate_hz, "max_frame_rate_hz": policy.max_frame_rate_hz,
            "fallback_frame_rate_hz": policy.fallback_frame_rate_hz, "target_frame_rate_hz": policy.target_frame_rate_hz,
            "curriculum_epochs": policy.curriculum_epochs, "method": frontend.method,
            "resample_filterbank": frontend.resample_filterbank, "resample_grid_hz": frontend.resample_grid_hz,
        }
    if isinstance(model, DynResASRModel):
        args.model_conf = {**(args.model_conf or {}), "batchnorm_restat_utts": model.batchnorm_restat_utts}


# The plugin's only module-level mutable state, forced by ESPnet: its ASR task keeps the choices
# (frontend, specaug, model, batch types) and the methods that build the model and the iterators
# as module/class attributes, with no plugin API, so registration writes into them once per process.
_registered = False


def register() -> None:
    """Add the plugin's names to ESPnet's ASR task (idempotent)."""
    global _registered
    if _registered:
        return
    espnet_asr.frontend_choices.classes.update(FRONTENDS)
    espnet_asr.specaug_choices.classes.update(SPECAUGS)
    espnet_asr.model_choices.classes.update(MODELS)
    BATCH_TYPES.update(BATCH_TYPE_DOCS)
    espnet_asr.ASRTask.build_sequence_iter_factory = classmethod(build_sequence_iter_factory)
    espnet_asr.ASRTask.build_model = classmethod(build_model)
    espnet_asr.ASRTask.add_task_arguments = classmethod(add_task_arguments)
    _registered = True
