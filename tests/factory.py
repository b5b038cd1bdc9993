"""Fixture factory for the test suite: real FSDD audio, synthetic shape files, tiny models.

Everything the tests build comes from here, so sizes and paths live in one place.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np
import soundfile as sf
import torch
import torchaudio

REPO_ROOT = Path(__file__).resolve().parents[1]
FSDD_DIR = REPO_ROOT.parent / "shared" / "data" / "fsdd" / "recordings"
RECIPE_DIR = REPO_ROOT / "egs2" / "fsdd_digits" / "asr1"
def load_script(path: Path):
    """Import a script that is not a package module (``benchmarks/*.py``, the recipe's ``local/*.py``).

    Registered in ``sys.modules`` under its file stem, so dataclasses defined in it resolve.
    """
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# The recipe's analysis settings at 16 kHz (25 ms window, 10 ms shift = 100 Hz); DynResFrontend's
# defaults are DefaultFrontend's (window = n_fft, hop 128).
RECIPE_FRONTEND = dict(n_fft=512, win_length=400, hop_length=160)


def fsdd_files(count: int, start: int = 0) -> List[Path]:
    files = sorted(FSDD_DIR.glob("*.wav"))
    if len(files) < start + count:
        raise FileNotFoundError(
            f"need {start + count} FSDD recordings under {FSDD_DIR}, found {len(files)}: this test reads the shared "
            "FSDD recordings (3,000 WAV files), expected in ../shared/data/fsdd/recordings beside the repository"
        )
    return files[start : start + count]


def real_utterances(count: int, fs_hz: int = 16000, concat: int = 1, start: int = 0) -> List[torch.Tensor]:
    """``count`` real utterances (float32 mono at ``fs_hz``), each ``concat`` FSDD digits joined."""
    files = fsdd_files(count * concat, start)
    out = []
    for i in range(count):
        parts = [sf.read(f, dtype="float32")[0] for f in files[i * concat : (i + 1) * concat]]
        wav = torch.from_numpy(np.concatenate(parts))
        out.append(torchaudio.functional.resample(wav, 8000, fs_hz) if fs_hz != 8000 else wav)
    return out


def pad_batch(wavs: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``speech (B, T_samples)`` zero-padded and ``speech_lengths (B,)`` int64."""
    lengths = torch.tensor([len(w) for w in wavs], dtype=torch.long)
    return torch.nn.utils.rnn.pad_sequence(list(wavs), batch_first=True), lengths


def write_shape_files(tmp: Path, num_samples: Sequence[int], tokens: Sequence[int] = None, vocab: int = 13):
    """ESPnet shape files (``speech_shape``: samples; ``text_shape.word``: tokens,vocab)."""
    keys = [f"utt{i:06d}" for i in range(len(num_samples))]
    speech = tmp / "speech_shape"
    speech.write_text("".join(f"{k} {n}\n" for k, n in zip(keys, num_samples)))
    tokens = tokens if tokens is not None else [max(1, n // 8000) for n in num_samples]
    text = tmp / "text_shape.word"
    text.write_text("".join(f"{k} {t},{vocab}\n" for k, t in zip(keys, tokens)))
    return [str(speech), str(text)], dict(zip(keys, num_samples))


TOKENS = ["<blank>", "<unk>", "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "<sos/eos>"]


def tiny_asr_args(**overrides) -> argparse.Namespace:
    """Arguments for ``ASRTask.build_model``: a tiny Conformer + Transformer decoder."""
    from espnet2.tasks.asr import ASRTask

    parser = ASRTask.get_parser()
    args = parser.parse_args(["--token_list", "none", "--output_dir", "unused"])  # nothing is written
    args.token_list = list(TOKENS)
    args.input_size = None
    args.frontend = "dynres"
    args.frontend_conf = {"n_mels": 20, **RECIPE_FRONTEND}
    args.specaug = None
    args.normalize = None
    args.encoder = "conformer"
    args.encoder_conf = dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=2, input_layer="conv2d")
    args.decoder = "transformer"
    args.decoder_conf = dict(attention_heads=2, linear_units=32, num_blocks=1)
    args.model = "token_normalized"
    args.model_conf = dict(ctc_weight=0.3)
    args.grad_clip = 1.0  # the plugin's rule for model: token_normalized (config_checks.check_token_normalized_grad_clip)
    if overrides.get("model") == "espnet" and "frontend" not in overrides:
        # ESPnet's own model takes ESPnet's own frontend (the dynres switches need model: dynres or
        # token_normalized); DefaultFrontend equals the dynres frontend outside a training step.
        args.frontend = "default"
        args.frontend_conf = {"n_mels": 20, **RECIPE_FRONTEND}
    for k, v in overrides.items():
        setattr(args, k, v)
    return args


# Float32 roundings in a row (tests/float_tolerance.py) from speech to build_tiny_model's encoder output,
# an upper bound summed over its stages: the frontend's DFT (512 products a bin) and mel sum (257 bins);
# the conv2d embedding (3x3 taps, 16 x 3x3, a 16 x 4 linear); per Conformer block (2): two feed-forwards
# (16 then 32 terms), attention (four 16-term projections, 8-term content and position scores, a softmax
# sum and a weighted sum over <= 128 subsampled frames), the convolution module (16, 31 taps, 16) and
# six LayerNorms (mean and variance over 16).
TINY_ENCODER_REDUCTION_LENGTH = (512 + 257) + (9 + 16 * 9 + 16 * 4) + 2 * (
    2 * (16 + 32) + (4 * 16 + 2 * 8 + 2 * 128) + (16 + 31 + 16) + 6 * 2 * 16)
# ... to a parameter gradient of the training loss: the encoder, the decoder block (self- and source
# attention as above, a feed-forward, three LayerNorms, the 16-term output layer), the losses (13-way
# log-softmax, label smoothing over 13 classes x <= 64 tokens, CTC's recursion at <= 4 roundings a frame
# over <= 128 frames), the same chain back, then a weight gradient's sum over the batch's positions
# (<= 4 utterances x 100 x 9 after the first stride-2 3x3 convolution of <= 2 s at 20 mels).
TINY_GRADIENT_REDUCTION_LENGTH = 2 * (TINY_ENCODER_REDUCTION_LENGTH + (2 * (4 * 16 + 2 * 8 + 2 * 128) + (16 + 32)
                                                                       + 3 * 2 * 16 + 16 + 13 + 13 * 64 + 4 * 128)
                                      ) + 4 * 100 * 9


def build_tiny_model(seed: int = 0, **overrides):
    return build_tiny_model_and_reestimate(seed, **overrides)[0]


def build_tiny_model_and_reestimate(seed: int = 0, **overrides):
    """:func:`build_tiny_model` and the BatchNorm re-estimate step the plugin's trainer runs it with
    (``DynResTrainer.build_options(args).batchnorm_reestimate``)."""
    from espnet2.tasks.asr import ASRTask
    from espnet_dynres.glue.trainer import DynResTrainer

    torch.manual_seed(seed)
    args = tiny_asr_args(**overrides)
    return ASRTask.build_model(args), DynResTrainer.build_options(args).batchnorm_reestimate


def random_text(batch: int, max_len: int, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``text (B, L_tokens)`` int64 padded with -1, ``text_lengths (B,)`` int64 (1..max_len)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (batch,), generator=g)
    text = torch.full((batch, int(lengths.max())), -1, dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        text[b, :n] = torch.randint(2, len(TOKENS) - 1, (n,), generator=g)
    return text, lengths


DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def write_wav(path: Path, wav, fs_hz: int = 16000, subtype: str = "PCM_16") -> Path:
    """Write ``wav`` (``(T_samples,)`` or ``(T_samples, C)`` float) as a WAV file; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = wav.numpy() if isinstance(wav, torch.Tensor) else np.asarray(wav)
    sf.write(str(path), data, fs_hz, subtype=subtype)
    return path


def write_data_dir(out_dir: Path, count: int, start: int = 0, concat: int = 1, fs_hz: int = 16000) -> Path:
    """A Kaldi-style data dir of real FSDD utterances at ``fs_hz``.

    Writes ``wav.scp``, ``text`` (digit words), ``utt2spk``, ``utt2num_samples``
    and ``speech_shape`` / ``text_shape.word`` (ESPnet shape files: samples;
    tokens,vocab) for ``count`` utterances of ``concat`` joined FSDD digits.
    """
    files = fsdd_files(count * concat, start)
    wavs = real_utterances(count, fs_hz=fs_hz, concat=concat, start=start)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = {name: [] for name in ("wav.scp", "text", "utt2spk", "utt2num_samples", "speech_shape", "text_shape.word")}
    for i, wav in enumerate(wavs):
        utt = f"spk-{i:05d}"
        words = [DIGIT_WORDS[int(f.name.split("_")[0])] for f in files[i * concat : (i + 1) * concat]]
        path = write_wav(out_dir / "wav" / f"{utt}.wav", wav, fs_hz)
        rows["wav.scp"].append(f"{utt} {path}")
        rows["text"].append(f"{utt} {' '.join(words)}")
        rows["utt2spk"].append(f"{utt} spk")
        rows["utt2num_samples"].append(f"{utt} {len(wav)}")
        rows["speech_shape"].append(f"{utt} {len(wav)}")
        rows["text_shape.word"].append(f"{utt} {len(words)},{len(TOKENS)}")
    return write_rows(out_dir, rows)


def write_rows(out_dir: Path, rows: dict) -> Path:
    """Write each Kaldi-style file of ``rows`` (file name -> lines) and the word ``tokens.txt``."""
    for name, lines in rows.items():
        (out_dir / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    (out_dir / "tokens.txt").write_text("".join(t + "\n" for t in TOKENS), encoding="utf-8")
    return out_dir


def write_tiny_asr_model(out_dir: Path, seed: int = 0, **overrides) -> Tuple[Path, Path]:
    """``(config.yaml, model.pth)`` of an untrained tiny model, loadable by ``Speech2Text``."""
    import yaml

    out_dir.mkdir(parents=True, exist_ok=True)
    args = tiny_asr_args(**overrides)
    model = build_tiny_model(seed=seed, **overrides)
    config, weights = out_dir / "config.yaml", out_dir / "model.pth"
    with open(config, "w", encoding="utf-8") as f:
        yaml.safe_dump(vars(args), f)
    torch.save(model.state_dict(), weights)
    return config, weights


def deterministic_model_overrides(**model_conf) -> dict:
    """``build_tiny_model`` overrides for a model whose training-mode output is a function of each
    utterance alone: ``DefaultFrontend`` (100 Hz), no dropout, no SpecAugment, and no convolution
    module (its BatchNorm would mix the utterances of a batch). For split-batch / DDP comparisons."""
    no_dropout = dict(dropout_rate=0.0, positional_dropout_rate=0.0)
    return dict(
        frontend="default",
        frontend_conf={"n_mels": 20},
        encoder_conf=dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=2, input_layer="conv2d",
                          use_cnn_module=False, attention_dropout_rate=0.0, **no_dropout),
        decoder_conf=dict(attention_heads=2, linear_units=32, num_blocks=1, self_attention_dropout_rate=0.0,
                          src_attention_dropout_rate=0.0, **no_dropout),
        model="token_normalized",
        model_conf=dict(model_conf),
    )


def task_args(data_dir: Path, *argv: str, output_dir: str = "unused") -> argparse.Namespace:
    """ESPnet's parsed ASR arguments for ``data_dir`` (from :func:`write_data_dir`) as train and
    valid set, the recipe's dynres switches and frontend settings, then ``argv`` (later wins)."""
    from espnet2.tasks.asr import ASRTask

    d = str(data_dir)
    data = []
    for split in ("train", "valid"):
        data += [f"--{split}_data_path_and_name_and_type", f"{d}/wav.scp,speech,sound",
                 f"--{split}_data_path_and_name_and_type", f"{d}/text,text,text",
                 f"--{split}_shape_file", f"{d}/speech_shape", f"--{split}_shape_file", f"{d}/text_shape.word"]
    conf = [f"--frontend_conf={k}={v}" for k, v in RECIPE_FRONTEND.items()]
    return ASRTask.get_parser().parse_args(
        data + ["--output_dir", output_dir, "--token_list", f"{d}/tokens.txt", "--token_type", "word",
                "--use_preprocessor", "true", "--num_workers", "0", "--batch_type", "dynres", "--frontend", "dynres",
                "--model", "token_normalized", "--grad_clip", "1"] + conf + list(argv)
    )


def training_data_args(train_dir: Path, valid_dir: Path, speech: str = "wav.scp,speech,sound") -> List[str]:
    """ESPnet's training arguments for the data dirs of :func:`write_data_dir` (or a feature dir):
    word tokens, the preprocessor, ``speech`` (file in the dir, name, type) and text for train and
    valid, and both shape files of each."""
    file, name_and_type = speech.split(",", 1)
    args = ["--use_preprocessor", "true", "--token_type", "word", "--token_list", str(train_dir / "tokens.txt")]
    for split, d in (("train", train_dir), ("valid", valid_dir)):
        args += [f"--{split}_data_path_and_name_and_type", f"{d / file},{name_and_type}",
                 f"--{split}_data_path_and_name_and_type", f"{d / 'text'},text,text",
                 f"--{split}_shape_file", str(d / "speech_shape"), f"--{split}_shape_file", str(d / "text_shape.word")]
    return args


def plan_of(frames):
    """A ``BatchPlan`` of ``frames`` (one count per utterance, any int iterable or tensor): ``RULE`` when
    they share one count, else ``PADDED``, as the sampler labels such plans."""
    from espnet_dynres.core.batch_planner import BatchKind, BatchPlan

    frames = tuple(int(t) for t in (frames.tolist() if isinstance(frames, torch.Tensor) else frames))
    return BatchPlan(frames, BatchKind.RULE if len(set(frames)) == 1 else BatchKind.PADDED)


def planned_below_clamp(sampler, epoch: int) -> int:
    """How many utterances ``sampler`` plans below its clamp in ``epoch`` (``FrameRatePolicy.below_clamp``)."""
    planned = sampler.planned_batches(epoch)
    samples = [sampler.utt2samples[k] for b in planned for k in b.keys]
    return int(sampler.policy.below_clamp(samples, [t for b in planned for t in b.plan.frames]).sum())


def equal_length_batch(count: int = 4):
    """``(speech (B, T_samples), lengths (B,), text, text_lengths)``: ``count`` real two-digit utterances
    cut to one length (so the BatchNorm re-estimate's padding-free batches cut nothing)."""
    wavs = real_utterances(count, concat=2)
    n = min(w.numel() for w in wavs)
    speech, lengths = pad_batch([w[:n] for w in wavs])
    text, text_lengths = random_text(count, 4)
    return speech, lengths, text, text_lengths


# One utterance's figures from the policy's array methods (the package plans whole arrays at once).
def frame_range(policy, num_samples: int, min_rate_hz: float = None) -> Tuple[int, int]:
    """``(lo, hi)`` frame counts of one utterance inside the clamp (``min_rate_hz`` replacing its low end)."""
    lo, hi = policy.frame_count_ranges([int(num_samples)], min_rate_hz)
    return int(lo[0]), int(hi[0])


def standard_count(policy, num_samples: int) -> int:
    """One utterance's standard frame count, ``1 + L // hop_length``."""
    return int(policy.standard_frame_counts([int(num_samples)])[0])


def common_frame_count(policy, lengths: Sequence[int], min_rate_hz: float = None, epoch: int = None):
    """The batch rule's ``T`` for utterances of ``lengths`` samples, or ``None`` with no common count in the
    clamp (``min_rate_hz`` replacing its low end; ``epoch`` for the curriculum)."""
    if len(lengths) == 0:
        raise ValueError("common_frame_count needs at least one utterance")
    lo, hi = policy.frame_count_ranges(list(lengths), min_rate_hz)
    total = int(policy.standard_frame_counts(list(lengths)).sum())
    return policy.pick_frame_count(int(lo.max()), int(hi.min()), total, len(lengths), epoch)


def frame_shift(policy, num_samples: int, num_frames: int, fs_hz: int = None) -> float:
    """The policy's frame shift (samples) that gives one utterance ``num_frames`` frames."""
    fs = None if fs_hz is None else torch.tensor([float(fs_hz)], dtype=torch.float64)
    return float(policy.frame_shifts_samples(torch.tensor([int(num_samples)]), torch.tensor([int(num_frames)]), fs)[0])


def frame_rate(policy, num_samples: int, num_frames: int) -> float:
    """The frame rate (Hz) of one utterance brought to ``num_frames``."""
    return policy.fs / frame_shift(policy, num_samples, num_frames)
