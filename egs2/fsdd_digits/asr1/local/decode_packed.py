#!/usr/bin/env python3
"""Stage 15 check: unpack a packed model with espnet_model_zoo and decode one test file.

Usage: decode_packed.py --packed exp/asr_x/x_packed.zip --cachedir exp/model_zoo_cache \
           --wav_scp dump/raw/test/wav.scp --text dump/raw/test/text

Loads the zip with ``ModelDownloader.download_and_unpack`` and builds
``espnet2.bin.asr_inference.Speech2Text`` from it (after ``import espnet_dynres``,
which registers the plugin's frontend and model), then decodes the first
utterance of ``--wav_scp`` and prints reference and hypothesis.
"""

import argparse

import soundfile as sf

import espnet_dynres  # noqa: F401  (registers frontend: dynres, model: token_normalized)
from espnet2.bin.asr_inference import Speech2Text
from espnet_model_zoo.downloader import ModelDownloader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packed", required=True)
    ap.add_argument("--cachedir", required=True)
    ap.add_argument("--wav_scp", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--beam_size", type=int, default=4)
    args = ap.parse_args()

    files = ModelDownloader(cachedir=args.cachedir).download_and_unpack(args.packed)
    speech2text = Speech2Text(**files, device="cpu", beam_size=args.beam_size, ctc_weight=0.3)
    with open(args.wav_scp, encoding="utf-8") as f:
        utt, path = f.readline().split(maxsplit=1)
    refs = dict(line.rstrip("\n").split(maxsplit=1) for line in open(args.text, encoding="utf-8"))
    speech, fs_hz = sf.read(path.strip(), dtype="float32")
    hyp = speech2text(speech)[0][0]
    print(f"decode_packed.py: unpacked {args.packed} into {args.cachedir}")
    print(f"  {utt} ({len(speech) / fs_hz:.2f} s)\n  REF: {refs.get(utt, '')}\n  HYP: {hyp}")


if __name__ == "__main__":
    main()
