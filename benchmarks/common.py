"""What more than one script under ``benchmarks/`` needs: the FSDD recordings and real batches of them.

The scripts import it as ``from common import ...`` (``benchmarks/`` is a script's first
``sys.path`` entry when it runs; each script also adds it when imported from its file path).
Nothing here imports the test suite.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
# The recipe's default (egs2/fsdd_digits/asr1/run.sh --fsdd_dir): the FSDD WAV files beside the repository.
DEFAULT_FSDD_DIR = REPO.parent / "shared" / "data" / "fsdd" / "recordings"
FSDD_FS_HZ = 8000  # every FSDD recording is 8 kHz mono


def fsdd_recordings(fsdd_dir: Optional[Path] = None, count: int = 1, start: int = 0, hint: str = "") -> List[Path]:
    """The sorted FSDD WAV files ``start .. start + count - 1`` of ``fsdd_dir`` (default ``DEFAULT_FSDD_DIR``).

    ``count=None`` returns every file from ``start`` on (at least one).

    Raises:
        FileNotFoundError: fewer files than asked for; the message names the folder (and ``hint``).
    """
    fsdd_dir = Path(fsdd_dir) if fsdd_dir is not None else DEFAULT_FSDD_DIR
    files = sorted(fsdd_dir.glob("*.wav"))
    need = start + (count if count is not None else 1)
    if len(files) < need:
        state = "no such folder" if not fsdd_dir.is_dir() else f"found {len(files)} *.wav"
        raise FileNotFoundError(
            f"need {need} FSDD recordings (*.wav) under {fsdd_dir} ({state}): the FSDD recordings "
            f"(3,000 WAV files) are expected in ../shared/data/fsdd/recordings beside the repository; "
            f"pass --fsdd_dir DIR{'; ' + hint if hint else ''}"
        )
    return files[start:] if count is None else files[start : start + count]


def real_utterances(count: int, fs_hz: int = 16000, concat: int = 1, start: int = 0,
                    fsdd_dir: Optional[Path] = None) -> list:
    """``count`` real utterances (float32 mono tensors at ``fs_hz``), each ``concat`` FSDD recordings joined.

    The files are ``fsdd_recordings(fsdd_dir, count * concat, start)`` in order; the joined 8 kHz
    audio is resampled once per utterance.
    """
    import numpy as np
    import soundfile
    import torch
    import torchaudio

    files = fsdd_recordings(fsdd_dir, count * concat, start)
    out = []
    for i in range(count):
        parts = [soundfile.read(f, dtype="float32")[0] for f in files[i * concat : (i + 1) * concat]]
        wav = torch.from_numpy(np.concatenate(parts))
        out.append(torchaudio.functional.resample(wav, FSDD_FS_HZ, fs_hz) if fs_hz != FSDD_FS_HZ else wav)
    return out


def pad_batch(wavs: Sequence) -> Tuple:
    """``speech (B, T_samples)`` zero-padded as ESPnet's collate pads, and ``speech_lengths (B,)`` int64."""
    import torch

    lengths = torch.tensor([len(w) for w in wavs], dtype=torch.long)
    return torch.nn.utils.rnn.pad_sequence(list(wavs), batch_first=True), lengths
