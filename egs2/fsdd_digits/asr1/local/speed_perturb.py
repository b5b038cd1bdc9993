#!/usr/bin/env python3
"""Stage 2 (``--speed_perturb_factors``) and stage 1 (``--test_speed``): speed-changed copies of a data dir.

Usage:
    speed_perturb.py --src data/train --dst data/train_sp --factors 0.9 1.0 1.1     # training (stage 2)
    speed_perturb.py --src data/test --dst data/test_speed0.9 --factors 0.9 --keep_ids  # a test set

A speed change by ``f`` plays the recording ``f`` times as fast with pitch and tempo moved together,
as SoX's ``speed`` effect and ESPnet's ``perturb_data_dir_speed.sh`` do: the ``T_samples`` samples
are taken as sampled at ``f × fs`` and resampled to ``fs`` with the SoX resampler library (``soxr``,
high quality), giving ``round(T_samples / f)`` samples (0.9: about 1/0.9 = 1.11 times as long and
lower in pitch).

Training (several factors, no ``--keep_ids``): as ESPnet's ``asr.sh`` stage 2, every factor other
than 1.0 gives a copy whose utterance and speaker ids are prefixed ``sp<f>-`` (``sp0.9-utt...``);
factor 1.0 keeps the originals and their ids; ``<dst>`` holds all copies together (``wav.scp``,
``text``, ``utt2spk``, ``spk2utt``, ``utt2dur`` in seconds after the change, sorted by id).  Audio
of the changed copies is written as 16-bit PCM WAV under ``<dst>/wav/``; factor 1.0 keeps the
original paths.

A test set (one factor, ``--keep_ids``): the ids stay, so the test set's references score it
(a speed-changed test set beside the tempo-changed ones of ``local/tempo_perturb.py``).

Errors name the utterance: a missing or unreadable file, audio that is not mono.
"""

import argparse
import shutil
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import soundfile as sf
import soxr
from tqdm import tqdm

from espnet_dynres.core.readers import read_keyed_file
from espnet_dynres.glue.data_checks import check_audio_file


def speed_change(wav: np.ndarray, fs_hz: int, factor: float) -> np.ndarray:
    """``wav (T_samples,)`` float at ``fs_hz`` played ``factor`` times as fast, pitch moved with it (SoX's
    ``speed``): ``(≈ T_samples / factor,)`` float32 at ``fs_hz``, resampled by soxr from ``factor × fs_hz``.

    Raises:
        ValueError: ``factor <= 0``.
    """
    if factor <= 0:
        raise ValueError(f"speed factor must be > 0, got {factor}")
    if factor == 1.0 or len(wav) == 0:
        return wav.astype(np.float32)
    return soxr.resample(wav.astype(np.float32), factor * fs_hz, fs_hz, quality="HQ").astype(np.float32)


def factor_name(factor: float) -> str:
    """``0.9`` -> ``"0.9"``, ``1.0`` -> ``"1.0"`` (ESPnet's ``sp0.9-`` prefixes)."""
    return f"{factor:g}" if factor != int(factor) else f"{factor:.1f}"


def perturb(src: Path, dst: Path, factors: List[float], keep_ids: bool) -> Dict[str, float]:
    """Write ``dst`` from ``src`` (module docstring); returns ``{utt_id: duration_sec}`` of ``dst``."""
    wav_scp = read_keyed_file(src / "wav.scp")
    text = read_keyed_file(src / "text")
    utt2spk = read_keyed_file(src / "utt2spk") if (src / "utt2spk").is_file() else {u: u for u in wav_scp}
    missing = sorted(set(wav_scp) - set(text))
    if missing:
        raise SystemExit(f"speed_perturb.py: {len(missing)} utterances of {src / 'wav.scp'} have no line in "
                         f"{src / 'text'}, e.g. {missing[:5]}; fix data prep")
    (dst / "wav").mkdir(parents=True, exist_ok=True)
    scp, txt, spk, dur = {}, {}, {}, {}
    for factor in factors:
        prefix = "" if keep_ids or factor == 1.0 else f"sp{factor_name(factor)}-"
        for utt, path in tqdm(wav_scp.items(), desc=f"speed {factor_name(factor)}", file=sys.stderr, mininterval=2.0):
            try:
                check_audio_file(utt, path)  # missing, unreadable, truncated or not mono: named, with the fix
            except ValueError as exc:
                raise SystemExit(f"speed_perturb.py: {src / 'wav.scp'}: {exc}") from None
            wav, fs_hz = sf.read(path, dtype="float32")
            new = prefix + utt
            if factor == 1.0:
                scp[new], n = str(Path(path).resolve()), len(wav)
            else:
                out = speed_change(wav, fs_hz, factor)
                target = (dst / "wav" / f"{new}.wav").resolve()
                sf.write(str(target), out, fs_hz, subtype="PCM_16")
                scp[new], n = str(target), len(out)
            txt[new] = text[utt]
            spk[new] = prefix + utt2spk.get(utt, utt)
            dur[new] = n / fs_hz
    order = sorted(scp, key=lambda u: u.encode())
    (dst / "wav.scp").write_text("".join(f"{u} {scp[u]}\n" for u in order))
    (dst / "text").write_text("".join(f"{u} {txt[u]}\n" for u in order))
    (dst / "utt2spk").write_text("".join(f"{u} {spk[u]}\n" for u in order))
    (dst / "utt2dur").write_text("".join(f"{u} {dur[u]:.3f}\n" for u in order))
    spk2utt: Dict[str, List[str]] = {}
    for u in order:
        spk2utt.setdefault(spk[u], []).append(u)
    (dst / "spk2utt").write_text("".join(f"{s} {' '.join(us)}\n" for s, us in sorted(spk2utt.items(), key=lambda kv: kv[0].encode())))
    return dur


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, required=True, help="Kaldi-style data dir (wav.scp, text, utt2spk)")
    ap.add_argument("--dst", type=Path, required=True, help="output data dir")
    ap.add_argument("--factors", type=float, nargs="+", required=True,
                    help="speed factors (> 0; 0.9 = slower and lower, 1.1 = faster and higher; 1.0 = the originals)")
    ap.add_argument("--keep_ids", action="store_true",
                    help="one factor, ids unchanged (a speed-changed test set scored with the original references)")
    args = ap.parse_args(argv)
    bad = [f for f in args.factors if f <= 0]
    if bad:
        ap.error(f"--factors must be > 0, got {bad}")
    if len(set(args.factors)) != len(args.factors):
        ap.error(f"--factors repeats a factor: {args.factors}")
    if args.keep_ids and len(args.factors) != 1:
        ap.error("--keep_ids takes exactly one factor (two copies would share the ids)")
    dur = perturb(args.src, args.dst, args.factors, args.keep_ids)
    print(f"{args.dst}: {len(dur)} utterances, speed factors {' '.join(map(factor_name, args.factors))} "
          f"(pitch and tempo moved together)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
