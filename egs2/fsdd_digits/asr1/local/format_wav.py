#!/usr/bin/env python3
"""Stage 3: resample a Kaldi-style data dir to ``--fs`` and write ESPnet's raw dump.

Usage: format_wav.py --src data/train --dst dump/raw/org/train --fs 16k

Reads ``wav.scp`` (utt_id path), resamples every utterance with
``torchaudio.functional.resample`` (windowed-sinc, ``sinc_interp_hann``), writes
16-bit PCM WAV files under ``<dst>/data/`` and, in ``<dst>``: ``wav.scp``,
``text``, ``utt2spk``, ``spk2utt``, ``utt2num_samples`` (samples at ``--fs``),
``feats_type`` (``raw``) and ``audio_format`` (``wav``).

Errors name the utterance: unreadable or truncated audio, not mono, NaN/inf
samples, or an utterance missing from ``text``
(:mod:`espnet_dynres.glue.data_checks`).  An empty recording is kept (empty):
stage 4 removes it from training and validation sets and lists it; in a
test set it is decoded to an empty hypothesis.
"""

import argparse
import shutil
import sys
from pathlib import Path

import soundfile as sf
import torch
import torchaudio
from tqdm import tqdm

from espnet2.fileio.read_text import read_2columns_text

from espnet_dynres.core.frame_rate_policy import parse_fs
from espnet_dynres.glue.data_checks import check_audio_file, check_waveform



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, required=True, help="Kaldi-style data dir with wav.scp and text")
    ap.add_argument("--dst", type=Path, required=True, help="output dump dir")
    ap.add_argument("--fs", default="16k", help="target sampling rate (Hz or e.g. 16k)")
    args = ap.parse_args()
    fs_hz = parse_fs(args.fs)

    wav_scp = read_2columns_text(args.src / "wav.scp")
    text = read_2columns_text(args.src / "text")
    missing = sorted(set(wav_scp) - set(text))
    if missing:
        sys.exit(f"format_wav.py: {len(missing)} utterances of {args.src}/wav.scp have no line in text, e.g. {missing[:5]}; fix data prep")
    data_dir = args.dst / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    scp_lines, ns_lines = [], []
    for utt, path in tqdm(sorted(wav_scp.items()), desc=f"format {args.src.name}", unit="utt", mininterval=2.0):
        try:
            check_audio_file(utt, path)  # unreadable, truncated, not mono
            audio, in_fs = sf.read(path, dtype="float32", always_2d=True)
            check_waveform(audio, utt_id=utt, source=path, min_samples=0)  # NaN/inf
        except Exception as e:  # noqa: BLE001 — re-raised with the utterance named
            msg = str(e) if isinstance(e, ValueError) else f"cannot read audio of utterance {utt} ({path}): {e}"
            sys.exit(f"format_wav.py: {msg} (then re-run stage 1 or 3)")
        wav = torch.from_numpy(audio[:, 0])
        if in_fs != fs_hz and wav.numel() > 0:  # an empty file stays empty; stage 4 lists it (train/dev)
            wav = torchaudio.functional.resample(wav, in_fs, fs_hz)  # (T_samples_out,)
        out = data_dir / f"{utt}.wav"
        sf.write(out, wav.clamp(-1.0, 1.0).numpy(), fs_hz, subtype="PCM_16")
        scp_lines.append(f"{utt} {out.resolve()}\n")
        ns_lines.append(f"{utt} {wav.numel()}\n")
    (args.dst / "wav.scp").write_text("".join(scp_lines), encoding="utf-8")
    (args.dst / "utt2num_samples").write_text("".join(ns_lines), encoding="utf-8")
    (args.dst / "text").write_text("".join(f"{u} {text[u]}\n" for u in sorted(wav_scp)), encoding="utf-8")
    for name in ("utt2spk", "spk2utt", "utt2dur"):
        if (args.src / name).exists():
            shutil.copyfile(args.src / name, args.dst / name)
    (args.dst / "feats_type").write_text("raw\n")
    (args.dst / "audio_format").write_text("wav\n")
    print(f"format_wav.py: {len(scp_lines)} utterances at {fs_hz} Hz -> {args.dst}")


if __name__ == "__main__":
    main()
