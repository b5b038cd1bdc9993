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


def fsdd_files(count: int, start: int = 0) -> List[Path]:
    files = sorted(FSDD_DIR.glob("*.wav"))
    if len(files) < start + count:
        raise FileNotFoundError(f"need {start + count} FSDD recordings under {FSDD_DIR}, found {len(files)}")
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
    args = parser.parse_args(["--token_list", "none", "--output_dir", "/tmp/unused"])
    args.token_list = list(TOKENS)
    args.input_size = None
    args.frontend = "dynres"
    args.frontend_conf = {"n_mels": 20}
    args.specaug = None
    args.normalize = None
    args.encoder = "conformer"
    args.encoder_conf = dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=2, input_layer="conv2d")
    args.decoder = "transformer"
    args.decoder_conf = dict(attention_heads=2, linear_units=32, num_blocks=1)
    args.model = "token_normalized"
    args.model_conf = dict(ctc_weight=0.3)
    for k, v in overrides.items():
        setattr(args, k, v)
    return args


def build_tiny_model(seed: int = 0, **overrides):
    from espnet2.tasks.asr import ASRTask

    torch.manual_seed(seed)
    return ASRTask.build_model(tiny_asr_args(**overrides))


def random_text(batch: int, max_len: int, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``text (B, L_tokens)`` int64 padded with -1, ``text_lengths (B,)`` int64 (1..max_len)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (batch,), generator=g)
    text = torch.full((batch, int(lengths.max())), -1, dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        text[b, :n] = torch.randint(2, len(TOKENS) - 1, (n,), generator=g)
    return text, lengths
