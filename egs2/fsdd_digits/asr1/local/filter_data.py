#!/usr/bin/env python3
"""Stage 4: keep utterances between --min_wav_duration and --max_wav_duration seconds.

Usage: filter_data.py --src dump/raw/org/train --dst dump/raw/train --min_wav_duration 0.1 --max_wav_duration 40

Also removes utterances whose transcript is empty.  Nothing is removed silently:
every removed utterance is listed with its reason in ``<dst>/removed_utts.txt``
and the count is printed.  Applied to training and validation sets only.
"""

import argparse
import shutil
from pathlib import Path

import soundfile as sf

from espnet2.fileio.read_text import read_2columns_text



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--dst", type=Path, required=True)
    ap.add_argument("--min_wav_duration", type=float, default=0.1, help="seconds")
    ap.add_argument("--max_wav_duration", type=float, default=40.0, help="seconds")
    args = ap.parse_args()

    wav_scp = read_2columns_text(args.src / "wav.scp")
    text = read_2columns_text(args.src / "text")
    num_samples = {k: int(v) for k, v in read_2columns_text(args.src / "utt2num_samples").items()}
    fs_hz = None

    keep, removed = [], []
    for utt in sorted(wav_scp):
        if fs_hz is None:
            fs_hz = sf.info(wav_scp[utt]).samplerate
        dur_sec = num_samples[utt] / fs_hz
        if dur_sec < args.min_wav_duration:
            removed.append(f"{utt} shorter than {args.min_wav_duration} s ({dur_sec:.3f} s)")
        elif dur_sec > args.max_wav_duration:
            removed.append(f"{utt} longer than {args.max_wav_duration} s ({dur_sec:.3f} s)")
        elif not text.get(utt, "").strip():
            removed.append(f"{utt} empty transcript")
        else:
            keep.append(utt)
    args.dst.mkdir(parents=True, exist_ok=True)
    keep_set = set(keep)
    for name in ("wav.scp", "text", "utt2num_samples", "utt2spk", "utt2dur"):
        src = args.src / name
        if src.exists():
            rows = read_2columns_text(src)
            (args.dst / name).write_text("".join(f"{u} {rows[u]}\n" for u in keep if u in rows), encoding="utf-8")
    spk2utt = {}
    for u in keep:
        spk2utt.setdefault(u.split("-")[0], []).append(u)
    (args.dst / "spk2utt").write_text("".join(f"{s} {' '.join(us)}\n" for s, us in sorted(spk2utt.items())))
    for name in ("feats_type", "audio_format"):
        if (args.src / name).exists():
            shutil.copyfile(args.src / name, args.dst / name)
    (args.dst / "removed_utts.txt").write_text("".join(r + "\n" for r in removed), encoding="utf-8")
    assert len(keep_set) + len(removed) == len(wav_scp)
    print(f"filter_data.py: kept {len(keep)} of {len(wav_scp)} utterances of {args.src.name}; "
          f"removed {len(removed)} (list: {args.dst / 'removed_utts.txt'})")


if __name__ == "__main__":
    main()
