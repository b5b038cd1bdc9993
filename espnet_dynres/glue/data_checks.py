"""Checks of data files and waveforms, each raising ``ValueError`` that names the utterance or file and the fix.

Units: ``*_samples`` waveform samples, ``*_frames`` feature frames, ``*_hz`` sampling or frame rates."""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import soundfile
import torch

from espnet_dynres.core.ctc_minimum import min_feature_frames
from espnet_dynres.core.frontend_config import FrontendConfig
from espnet_dynres.core.readers import read_keyed_file
from espnet_dynres.glue.plugin_switches import dynres_switches

# Data types of ``*_data_path_and_name_and_type`` that are Kaldi-style "key value" files.
KEYED_FILE_TYPES = {
    "sound", "multi_columns_sound", "variable_columns_sound", "kaldi_ark", "npy", "text", "text_int",
    "text_float", "csv_int", "csv_float", "rttm", "score", "duration", "sound_with_rate",
}  # fmt: skip
SHOWN_KEYS = 5  # keys named in a message; the count is always given
# libsndfile's header log for a WAV whose data chunk runs past the end of the file.
_TRUNCATED_DATA_CHUNK = re.compile(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", re.M)


def _first(keys: Iterable[str]) -> List[str]:
    return sorted(keys)[:SHOWN_KEYS]


def min_input_samples(n_fft: int, hop_length: int, min_frames: int = 1) -> int:
    """Fewest samples ``center=True`` framing turns into ``min_frames`` frames (reflect padding, ``1 + L // hop``)."""
    return max(n_fft // 2 + 1, (int(min_frames) - 1) * int(hop_length))


def check_waveform(wav: Union[np.ndarray, torch.Tensor], *, utt_id: str, source: str = "",
                   min_samples: int = 1) -> None:
    """Reject a waveform that the frontend cannot turn into features.

    Args:
        wav: ``(T_samples,)`` or ``(T_samples, C)`` samples (float or int).
        utt_id, source: the utterance and where it came from, named in the message.
        min_samples: fewest samples accepted (:func:`min_input_samples`; 0 accepts an empty waveform).

    Raises:
        ValueError: more than one channel; fewer than ``min_samples`` samples; NaN or inf samples.
    """
    where = f"utterance {utt_id}" + (f" ({source})" if source else "")
    shape = tuple(wav.shape)
    if len(shape) == 2 and shape[1] == 1:
        wav = wav[:, 0]
    elif len(shape) != 1:
        channels = shape[1] if len(shape) == 2 else "?"
        raise ValueError(f"{where} has shape {shape} ({channels} channels); mono (T_samples,) is expected. "
                         "Down-mix or pick one channel when preparing the data (e.g. `sox in.wav -c 1 out.wav`).")
    n = int(wav.shape[0])
    if n < int(min_samples):
        raise ValueError(
            f"{where} has {n} samples; at least {int(min_samples)} are needed for one analysis "
            "window. Remove it from training data (recipe stage 4, --min_wav_duration) or re-create the file.")
    finite = torch.isfinite(wav).all() if isinstance(wav, torch.Tensor) else np.isfinite(wav).all()
    if not bool(finite):
        bad = int((~torch.isfinite(wav)).sum()) if isinstance(wav, torch.Tensor) else int((~np.isfinite(wav)).sum())
        raise ValueError(f"{where} has {bad} NaN/inf samples of {n}; re-create or remove the file.")


def check_audio_file(utt_id: str, path: str, *, fs_hz: Optional[int] = None,
                     mono: bool = True) -> soundfile._SoundFileInfo:
    """Read the header of one audio file, reject what training or decoding could not use; returns ``soundfile.info``.

    Args:
        utt_id, path: the utterance (named in the message) and its audio file (not a pipe).
        fs_hz, mono: the expected sampling rate (Hz; ``None`` = any); whether to refuse several channels.

    Raises:
        ValueError: unreadable (missing, not audio, no data), truncated (a WAV data chunk longer than
            the file), a sampling rate other than ``fs_hz``, or more than one channel when ``mono``.
    """
    try:
        info = soundfile.info(path)
    except Exception as e:  # noqa: BLE001 — libsndfile's many error types, re-raised with the utterance named
        raise ValueError(f"cannot read audio of utterance {utt_id} ({path}): {e}. Re-create or remove the file.") from e
    truncated = _TRUNCATED_DATA_CHUNK.search(info.extra_info or "")
    if truncated:
        raise ValueError(
            f"audio of utterance {utt_id} ({path}) is truncated: its header announces {truncated[1]} bytes of "
            f"samples but the file holds {truncated[2]}. Re-create the file (interrupted copy or write?).")
    if fs_hz is not None and int(info.samplerate) != int(fs_hz):
        raise ValueError(
            f"utterance {utt_id} ({path}) is sampled at {info.samplerate} Hz, but the model expects {fs_hz} Hz. "
            f"Resample the data to {fs_hz} Hz (recipe stage 3, --fs; or `sox in.wav -r {fs_hz} out.wav`).")
    if mono and info.channels != 1:
        raise ValueError(f"utterance {utt_id} ({path}) has {info.channels} channels; mono is expected. "
                         "Down-mix or pick one channel (e.g. `sox in.wav -c 1 out.wav`).")
    return info


def check_audio_files(wav_scp: Union[str, Path], *, fs_hz: Optional[int] = None, keys: Optional[Iterable[str]] = None,
                      mono: bool = True) -> int:
    """:func:`check_audio_file` for every utterance of ``wav_scp`` (or of ``keys``); returns the count checked.

    Raises:
        ValueError: the first bad file (:func:`check_audio_file`), or a key of ``keys`` missing from ``wav_scp``.
    """
    table = read_keyed_file(wav_scp)
    wanted = list(table) if keys is None else list(keys)
    missing = [k for k in wanted if k not in table]
    if missing:
        raise ValueError(
            f"{len(missing)} utterances are not in {wav_scp}, e.g. {_first(missing)}; use a key file made from it.")
    for key in wanted:
        path = table[key]
        if path.endswith("|"):
            continue  # a pipe: nothing to inspect before running it
        check_audio_file(key, path, fs_hz=fs_hz, mono=mono)
    return len(wanted)


def check_shape_file_keys(shape_files: Sequence[str], data_files: Sequence[Tuple[str, str, str]]) -> None:
    """Every utterance of ``shape_files`` (``utt_id N[,C]``) is in every keyed file of ``data_files``, and back.

    Raises:
        ValueError: naming the file, the missing or extra keys, and the fix (re-run collect-stats).
    """
    if not shape_files:
        return
    shape_keys = set(read_keyed_file(shape_files[0]))
    for other in shape_files[1:]:  # e.g. text_shape: blank lines and repeated keys, named
        read_keyed_file(other)
    for path, name, kind in data_files:
        if kind not in KEYED_FILE_TYPES:
            continue
        data_keys = set(read_keyed_file(path))
        missing, extra = shape_keys - data_keys, data_keys - shape_keys
        if missing or extra:
            parts = []
            if missing:
                parts.append(
                    f"{len(missing)} in the shape file only (e.g. {_first(missing)}; training would fail when it "
                    "reaches them)")
            if extra:
                parts.append(
                    f"{len(extra)} in the data file only (e.g. {_first(extra)}; they would never be trained on)")
            raise ValueError(
                f"shape file {shape_files[0]} and data file {path} ({name}) list different utterances: "
                f"{', '.join(parts)}. The data dir changed after the shape files were made: re-run collect-stats "
                "(recipe stage 10, asr.sh stage 10) for this data dir.")


def check_shape_file_lengths(shape_file: str, *, min_samples: int) -> None:
    """Every utterance of a speech shape file has at least ``min_samples`` samples.

    Raises:
        ValueError: naming the shorter ones (count, up to five with lengths) and the fix (the filter stage).
    """
    short = {}
    for key, value in read_keyed_file(shape_file).items():
        n = int(value.split(",")[0]) if value else 0
        if n < min_samples:
            short[key] = n
    if short:
        shown = {k: short[k] for k in _first(short)}
        raise ValueError(
            f"{len(short)} utterances in {shape_file} have fewer than {min_samples} samples (one analysis window), "
            f"e.g. {shown}. Remove them before training: recipe stage 4 (--min_wav_duration), "
            "or asr.sh --min_wav_duration; then re-run collect-stats.")


def check_shape_file_channels(shape_file: str) -> None:
    """Every utterance of a speech shape file is mono (``utt_id N`` or ``utt_id N,1``), as the dynres frontend needs.

    Raises:
        ValueError: naming the multi-channel ones (count, up to five with shapes) and the fix.
    """
    multi = {}
    for key, value in read_keyed_file(shape_file).items():
        fields = value.split(",")
        if len(fields) > 1 and fields[1].strip() not in ("", "1"):
            multi[key] = value
    if multi:
        shown = {k: multi[k] for k in _first(multi)}
        raise ValueError(
            f"{len(multi)} utterances in {shape_file} have more than one channel (samples,channels), e.g. {shown}; "
            "frontend: dynres takes mono audio. Down-mix or pick one channel when preparing the data (e.g. "
            "`sox in.wav -c 1 out.wav`; the recipe's stage 3 refuses such files), then re-run collect-stats.")


def check_transcripts(text_file: str, *, utt2num_tokens: Optional[Mapping[str, int]] = None) -> List[str]:
    """Warn naming the transcripts without tokens (per ``utt2num_tokens``, else blank); returns their ids (sorted).

    Raises:
        ValueError: a blank line or a repeated key (:func:`read_keyed_file`).
    """
    table = read_keyed_file(text_file)
    if utt2num_tokens is None:
        empty = sorted(k for k, v in table.items() if not v.strip())
    else:
        empty = sorted(k for k, n in utt2num_tokens.items() if int(n) == 0)
    if empty:
        logging.warning(
            f"{len(empty)} transcripts in {text_file} have no tokens, e.g. {_first(empty)}: only <eos> is trained "
            "on them (counted as empty_transcripts by model: token_normalized). Remove them (recipe stage 4 "
            "does) if they are mistakes.")
    return empty


def training_min_samples(args: argparse.Namespace) -> int:
    """Fewest samples a training utterance needs (``frontend_conf``, ``encoder_conf.input_layer``); 1 for features."""
    if getattr(args, "frontend", None) is None or getattr(args, "input_size", None) is not None:
        return 1
    conf = getattr(args, "frontend_conf", None) or {}
    input_layer = (getattr(args, "encoder_conf", None) or {}).get("input_layer", "conv2d")
    try:
        min_frames = min_feature_frames(1, input_layer)
    except ValueError:
        min_frames = 1
    return min_input_samples(int(conf.get("n_fft", FrontendConfig.n_fft)),
                             int(conf.get("hop_length", FrontendConfig.hop_length)), min_frames)


RAW_AUDIO_TYPES = ("sound", "multi_columns_sound", "variable_columns_sound", "sound_with_rate")


def check_raw_audio_data(args: argparse.Namespace, data_files: Sequence[Tuple[str, str, str]]) -> None:
    """``frontend: dynres`` / ``batch_type: dynres`` read the ``speech`` entry of ``data_files`` as raw audio.

    Raises:
        ValueError: the ``speech`` entry has a feature type (``kaldi_ark``, ``npy``, ...), named with the fixes.
    """
    switches = dynres_switches(args)
    if not switches:
        return
    for path, name, kind in data_files:
        if name == "speech" and kind not in RAW_AUDIO_TYPES:
            raise ValueError(
                f"{', '.join(switches)} computes features from raw audio, but the speech data {path} has type "
                f"{kind!r} (extracted features). Give raw audio (asr.sh --feats_type raw; type sound), or keep the "
                "features with batch_type: numel, frontend: null and input_size set (model: token_normalized "
                "works on features).")


def check_training_data(args: argparse.Namespace, iter_options) -> None:
    """All start-of-training data checks for one iterator (ESPnet's ``IteratorOptions``), before any batch is built.

    Raises:
        ValueError: a blank line in a shape or data file, or from :func:`check_shape_file_keys`,
            :func:`check_shape_file_lengths`, :func:`check_shape_file_channels` (``frontend: dynres``) and
            :func:`check_raw_audio_data`; :func:`check_transcripts` only warns.
    """
    shape_files = list(iter_options.shape_files or [])
    data_files = list(iter_options.data_path_and_name_and_type or [])
    check_raw_audio_data(args, data_files)
    check_shape_file_keys(shape_files, data_files)
    speech_shapes = [s for s in shape_files if Path(s).name.startswith("speech_shape")]
    if speech_shapes:
        check_shape_file_lengths(speech_shapes[0], min_samples=training_min_samples(args))
        if getattr(args, "frontend", None) == "dynres":
            check_shape_file_channels(speech_shapes[0])
    for path, name, kind in data_files:
        if name == "text" and kind == "text":
            check_transcripts(path)


def check_sampling_rate(args: argparse.Namespace, data_files: Sequence[Tuple[str, str, str]],
                        files_to_check: int = 3) -> None:
    """Reject training audio (``files_to_check`` per file) at a rate other than ``frontend_conf.fs`` (dynres only).

    Raises:
        ValueError: naming the utterance, its rate, ``fs`` and the fix.
    """
    if getattr(args, "frontend", None) != "dynres":
        return
    fs = FrontendConfig.from_conf(args.frontend_conf).fs
    for path, _name, kind in data_files:
        if kind == "sound":
            for utt, audio in list(read_keyed_file(path).items())[:files_to_check]:
                check_audio_file(utt, audio, fs_hz=fs, mono=False)
