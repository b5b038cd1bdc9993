#!/usr/bin/env python3
"""Stage 1 (``--test_tempo``): a tempo-changed copy of a test set, pitch kept.

Usage: tempo_perturb.py --src data/test --dst data/test_tempo1.25 --tempo 1.25

Every utterance of ``<src>/wav.scp`` is played ``--tempo`` times as fast (1.25: 25 % faster,
its duration divided by 1.25) with its pitch unchanged, by librosa's phase vocoder
(``librosa.effects.time_stretch`` with a 32 ms window and a quarter-window hop, so that the
vocoder's frames are those of speech analysis rather than its 2048-sample default).  Written to
``<dst>``: the audio as 16-bit PCM WAV files under ``<dst>/wav/``, ``wav.scp``, ``utt2dur``
(seconds after the change), and ``text``, ``utt2spk``, ``spk2utt`` copied (same utterance ids, so
the same references score it).  A copy of a corpus's test set is an ordinary test set for stages
3, 12 and 13.

Errors name the utterance: a missing or unreadable file, audio that is not mono.
"""

import argparse
import shutil
import sys
from pathlib import Path

import librosa
import numpy as np
import soundfile as sf
from tqdm import tqdm

from espnet_dynres.core.readers import read_keyed_file

WINDOW_SEC = 0.032


def tempo_change(wav: np.ndarray, fs_hz: int, tempo: float) -> np.ndarray:
    """``wav (T_samples,)`` float at ``fs_hz`` played ``tempo`` times as fast, pitch kept:
    ``(round(T_samples / tempo),)`` float32 (the vocoder's length, trimmed or zero-padded to it)."""
    if tempo <= 0:
        raise ValueError(f"tempo must be > 0, got {tempo}")
    n_fft = 1 << int(np.ceil(np.log2(WINDOW_SEC * fs_hz)))  # 256 at 8 kHz, 512 at 16 kHz
    out = librosa.effects.time_stretch(wav.astype(np.float32), rate=tempo, n_fft=n_fft, hop_length=n_fft // 4)
    target = int(round(len(wav) / tempo))
    return np.pad(out, (0, max(0, target - len(out))))[:target].astype(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, required=True, help="Kaldi-style data dir (wav.scp, text, utt2spk)")
    ap.add_argument("--dst", type=Path, required=True, help="output data dir")
    ap.add_argument("--tempo", type=float, required=True, help="speed factor, pitch kept (> 0; 1.25 = faster)")
    args = ap.parse_args(argv)
    if args.tempo <= 0:
        ap.error(f"--tempo must be > 0, got {args.tempo}")
    wav_scp = read_keyed_file(args.src / "wav.scp")
    (args.dst / "wav").mkdir(parents=True, exist_ok=True)
    scp, durations = [], []
    for utt, path in tqdm(wav_scp.items(), desc=f"tempo {args.tempo}", file=sys.stderr):
        if not path or not Path(path).is_file():
            raise SystemExit(f"tempo_perturb.py: {args.src / 'wav.scp'}: utterance {utt}: no audio file {path!r}")
        try:
            wav, fs_hz = sf.read(path, dtype="float32")
        except RuntimeError as exc:
            raise SystemExit(f"tempo_perturb.py: utterance {utt}: cannot read {path}: {exc}") from None
        if wav.ndim != 1:
            raise SystemExit(f"tempo_perturb.py: utterance {utt}: {path} has {wav.shape[1]} channels; "
                             "this recipe's test sets are mono")
        out = tempo_change(wav, fs_hz, args.tempo)
        dst = (args.dst / "wav" / f"{utt}.wav").resolve()
        sf.write(str(dst), out, fs_hz, subtype="PCM_16")
        scp.append(f"{utt} {dst}\n")
        durations.append(f"{utt} {len(out) / fs_hz:.3f}\n")
    (args.dst / "wav.scp").write_text("".join(scp))
    (args.dst / "utt2dur").write_text("".join(durations))
    for name in ("text", "utt2spk", "spk2utt"):
        if (args.src / name).is_file():
            shutil.copyfile(args.src / name, args.dst / name)
    print(f"{args.dst}: {len(scp)} utterances at tempo {args.tempo} (pitch kept)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
