"""``python -m espnet_dynres.bin.asr_inference``: ESPnet's ``asr_inference`` with the plugin and checked audio, empty
hypotheses for too-short utterances and long ones decoded in segments (``--max_segment_sec``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import yaml

import espnet_dynres  # noqa: F401  (registers the plugin's names with ESPnet)
from espnet.nets.beam_search import Hypothesis
from espnet.nets.pytorch_backend.transformer.subsampling import TooShortUttError
from espnet2.bin import asr_inference as espnet_asr_inference

from espnet_dynres.core.ctc_minimum import min_feature_frames
from espnet_dynres.core.frame_rate_policy import parse_fs
from espnet_dynres.core.readers import read_keyed_file
from espnet_dynres.glue.data_checks import check_audio_files, check_waveform, min_input_samples


def model_fs_hz(asr_train_config: Union[str, Path, None]) -> Optional[int]:
    """The model's ``frontend_conf.fs`` (Hz; default 16000), ``None`` without a config or for ``frontend: null``."""
    if asr_train_config is None or not Path(asr_train_config).exists():
        return None
    with open(asr_train_config, encoding="utf-8") as f:
        config = yaml.safe_load(f) or {}
    if config.get("frontend", "default") is None:
        return None
    return parse_fs((config.get("frontend_conf") or {}).get("fs", 16000))


def segment_bounds(speech: torch.Tensor, *, fs_hz: int, max_segment_sec: float, search_sec: float = 5.0,
                   frame_sec: float = 0.01) -> List[Tuple[int, int]]:
    """Contiguous ``(start, end)`` ranges covering ``speech (T_samples,)`` at ``fs_hz``, each <= ``max_segment_sec`` s.
    Raises:
        ValueError: ``max_segment_sec`` not above ``search_sec``."""
    if max_segment_sec <= search_sec:
        raise ValueError(f"max_segment_sec={max_segment_sec} must exceed the pause search window {search_sec} s")
    total = int(speech.shape[0])
    limit, search, frame = int(max_segment_sec * fs_hz), int(search_sec * fs_hz), max(1, int(frame_sec * fs_hz))
    bounds, start = [], 0
    while total - start > limit:
        lo = start + limit - search
        window = speech[lo : start + limit].float()
        energy = window[: len(window) // frame * frame].reshape(-1, frame).pow(2).mean(dim=1)  # (frames,)
        cut = lo + int(torch.argmin(energy)) * frame + frame // 2
        bounds.append((start, cut))
        start = cut
    bounds.append((start, total))
    return bounds


class Speech2Text(espnet_asr_inference.Speech2Text):
    """ESPnet's ``Speech2Text`` (plus ``max_segment_sec``) checking ``speech (T_samples,)`` or ``(T_samples, 1)`` at
    ``fs_hz`` Hz and answering every utterance (empty below :attr:`min_samples`; long: segments' 1-best joined).
    Raises:
        ValueError: ``fs_hz`` differs from the model's rate; more than one channel; NaN/inf samples."""
    default_max_segment_sec: Optional[float] = 60.0

    def __init__(self, *args, max_segment_sec: Union[float, None, str] = "default", **kwargs):
        super().__init__(*args, **kwargs)
        self.max_segment_sec = self.default_max_segment_sec if max_segment_sec == "default" else max_segment_sec
        train_args = self.asr_train_args
        frontend = getattr(self.asr_model, "frontend", None)
        self.fs_hz: Optional[int] = None
        self.min_samples = 1
        if frontend is not None:
            self.fs_hz = parse_fs((getattr(train_args, "frontend_conf", None) or {}).get("fs", 16000))
            stft = getattr(frontend, "stft", None)
            if stft is not None:
                input_layer = (getattr(train_args, "encoder_conf", None) or {}).get("input_layer", "conv2d")
                try:
                    min_frames = min_feature_frames(1, input_layer)
                except ValueError:  # a subsampling ctc_feasibility does not know: ESPnet's own check applies
                    min_frames = 1
                self.min_samples = min_input_samples(stft.n_fft, stft.hop_length, min_frames)

    def empty_result(self) -> List:
        """An n-best list of empty hypotheses (text ``""``, no tokens, score 0)."""
        hyp = Hypothesis(score=0.0, scores={}, states={}, yseq=torch.tensor([], dtype=torch.long))
        return [("", [], [], hyp)] * self.nbest

    def __call__(self, speech: Union[torch.Tensor, np.ndarray], fs_hz: Optional[int] = None, utt_id: str = "<input>"):
        if fs_hz is not None and self.fs_hz is not None and int(fs_hz) != self.fs_hz:
            raise ValueError(
                f"utterance {utt_id} is sampled at {fs_hz} Hz, but the model expects {self.fs_hz} Hz; resample "
                f"it first (e.g. torchaudio.functional.resample(speech, {fs_hz}, {self.fs_hz})).")
        check_waveform(speech, utt_id=utt_id, min_samples=0)
        if speech.ndim == 2:
            speech = speech[:, 0]
        if self.fs_hz is not None and self.max_segment_sec and speech.shape[0] > self.max_segment_sec * self.fs_hz:
            return self.decode_segments(torch.as_tensor(speech), utt_id)
        return self.decode_one(speech, utt_id)

    def decode_one(self, speech: Union[torch.Tensor, np.ndarray], utt_id: str):
        """ESPnet's decoding of ``speech (T_samples,)``, or empty hypotheses when it is too short."""
        if speech.shape[0] < self.min_samples:
            logging.warning(
                f"utterance {utt_id} has {speech.shape[0]} samples, fewer than the {self.min_samples} the "
                "frontend and the encoder's subsampling need: its hypothesis is empty.")
            return self.empty_result()
        try:
            return super().__call__(speech)
        except TooShortUttError as e:
            logging.warning(f"utterance {utt_id}: {e}; its hypothesis is empty.")
            return self.empty_result()

    def decode_segments(self, speech: torch.Tensor, utt_id: str) -> List:
        """Long-form: decode the :func:`segment_bounds` segments one by one and join their 1-best."""
        bounds = segment_bounds(speech, fs_hz=self.fs_hz, max_segment_sec=self.max_segment_sec)
        logging.info(f"utterance {utt_id}: {speech.shape[0] / self.fs_hz:.1f} s decoded in {len(bounds)} segments")
        texts, tokens, token_ids, score, yseq = [], [], [], 0.0, []
        for start, end in bounds:
            results = self.decode_one(speech[start:end], f"{utt_id}[{start}:{end}]")
            if isinstance(results, tuple):  # (n-best, intermediate CTC outputs)
                results = results[0]
            text, seg_tokens, seg_ids, hyp = results[0]
            if text:
                texts.append(text)
            tokens += list(seg_tokens)
            token_ids += list(seg_ids)
            score += float(hyp.score)
            yseq += [int(t) for t in seg_ids]
        hyp = Hypothesis(score=score, scores={}, states={}, yseq=torch.tensor(yseq, dtype=torch.long))
        return [(" ".join(texts), tokens, token_ids, hyp)]


def checked_batches(loader) -> Iterator:
    """ESPnet's ``(keys, batch)`` iterator; raises :func:`check_waveform`'s ``ValueError``, naming the utterance."""
    for keys, batch in loader:
        speech = batch.get("speech")
        if speech is not None:
            lengths = batch.get("speech_lengths")
            for b, key in enumerate(keys):
                wav = speech[b] if lengths is None else speech[b, : int(lengths[b])]
                check_waveform(wav, utt_id=key, min_samples=0)
        yield keys, batch


STATS_BESIDE_CONFIG = "feats_stats.npz"  # where export_espnet_config copies a run's statistics


def with_stats_found(config_file: Union[str, Path, None]) -> Union[str, Path, None]:
    """``config_file``, or a temp copy naming the ``feats_stats.npz`` beside it if its ``global_mvn`` stats are missing.
    Raises:
        FileNotFoundError: neither file exists; names both and the fix."""
    if config_file is None or not Path(config_file).is_file():
        return config_file
    config = yaml.safe_load(Path(config_file).read_text(encoding="utf-8")) or {}
    stats = (config.get("normalize_conf") or {}).get("stats_file")
    if config.get("normalize") != "global_mvn" or stats is None or Path(stats).exists():
        return config_file
    beside = Path(config_file).resolve().parent / STATS_BESIDE_CONFIG
    if not beside.is_file():
        raise FileNotFoundError(
            f"{config_file} names normalize_conf.stats_file {stats}, which does not exist from {Path.cwd()}, and no "
            f"{STATS_BESIDE_CONFIG} lies beside it. Decode from the recipe directory, or run python -m "
            "espnet_dynres.bin.export_espnet_config --exp_dir <exp> there once (it copies the statistics into the "
            "experiment folder).")
    config["normalize_conf"] = {**config["normalize_conf"], "stats_file": str(beside)}
    patched = Path(tempfile.mkdtemp(prefix="espnet_dynres_config_")) / Path(config_file).name
    patched.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    logging.info("%s: statistics %s not found; using %s beside the config", config_file, stats, beside)
    return patched


class CheckedASRTask(espnet_asr_inference.ASRTask):
    """``ASRTask`` with :func:`checked_batches` and :func:`with_stats_found` applied."""
    @classmethod
    def build_streaming_iterator(cls, *args, **kwargs):
        return checked_batches(super().build_streaming_iterator(*args, **kwargs))

    @classmethod
    def build_model_from_file(cls, config_file=None, model_file=None, device="cpu"):
        return super().build_model_from_file(with_stats_found(config_file), model_file, device)


def check_inference_audio(data_path_and_name_and_type: Sequence, key_file: Optional[str], fs_hz: Optional[int]) -> int:
    """Read the header of every audio file to decode (:func:`check_audio_files`); returns the number checked.
    Raises:
        ValueError: the first unreadable, truncated, wrongly sampled or multi-channel file, with its utterance."""
    keys = list(read_keyed_file(key_file)) if key_file else None
    checked = 0
    for path, _name, kind in data_path_and_name_and_type:
        if kind == "sound":
            checked += check_audio_files(path, fs_hz=fs_hz, keys=keys)
    return checked


@contextlib.contextmanager
def checked_decoding(max_segment_sec: Optional[float] = Speech2Text.default_max_segment_sec):
    """Within the block, ESPnet's ``inference()`` uses :class:`Speech2Text` and :class:`CheckedASRTask`."""
    saved = espnet_asr_inference.Speech2Text, espnet_asr_inference.ASRTask
    segmenting = type("Speech2Text", (Speech2Text,), {"default_max_segment_sec": max_segment_sec})
    espnet_asr_inference.Speech2Text, espnet_asr_inference.ASRTask = segmenting, CheckedASRTask
    try:
        yield
    finally:
        espnet_asr_inference.Speech2Text, espnet_asr_inference.ASRTask = saved


MAX_SEGMENT_HELP = ("decode an utterance longer than this many seconds in segments that end at pauses "
                    "(the segments' 1-best joined); 0 = never segment")


def get_parser() -> argparse.ArgumentParser:
    """ESPnet's ``asr_inference`` parser plus ``--max_segment_sec`` (so ``--help`` lists it)."""
    parser = espnet_asr_inference.get_parser()
    group = parser.add_argument_group("espnet_dynres")
    group.add_argument("--max_segment_sec", type=float, default=Speech2Text.default_max_segment_sec,
                       help=MAX_SEGMENT_HELP)
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """ESPnet's ``asr_inference`` main with the checks above, plus ``--max_segment_sec`` (s; 0 = off)."""
    argv = sys.argv[1:] if cmd is None else list(cmd)
    get_parser().parse_args(argv)  # --help, and errors naming every option, ours included
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--max_segment_sec", type=float, default=Speech2Text.default_max_segment_sec)
    known, rest = extra.parse_known_args(argv)
    args = espnet_asr_inference.get_parser().parse_args(rest)
    check_inference_audio(args.data_path_and_name_and_type, args.key_file, model_fs_hz(args.asr_train_config))
    with checked_decoding(known.max_segment_sec or None):
        espnet_asr_inference.main(rest)


if __name__ == "__main__":
    main()
