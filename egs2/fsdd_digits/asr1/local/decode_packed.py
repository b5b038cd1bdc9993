#!/usr/bin/env python3
"""Stage 15 check: unpack a packed model with espnet_model_zoo and decode one test file.

Usage: decode_packed.py --packed exp/asr_x/x_packed.zip --cachedir exp/model_zoo_cache \
           --wav_scp dump/raw/test/wav.scp --text dump/raw/test/text

Loads the zip with ``ModelDownloader.download_and_unpack`` and builds the
plugin's ``Speech2Text`` (ESPnet's, with input checks; see
``espnet_dynres.bin.asr_inference``) from it, then decodes the first
utterance of ``--wav_scp`` and prints reference and hypothesis.

espnet_model_zoo caches an unpacked local zip under a name made from its
*path*, so a model re-packed to the same path would be served from the old
unpack.  :func:`unpack` therefore gives every zip *content* its own cache
folder (``<cachedir>/<sha256 of the zip>``).
"""

import argparse
import hashlib
from pathlib import Path
from typing import Dict

import soundfile as sf

from espnet_dynres.bin.asr_inference import Speech2Text  # also registers the plugin's names
from espnet_dynres.core.readers import read_keyed_file
from espnet_model_zoo.downloader import ModelDownloader


def content_hash(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """First 16 hex digits of the SHA-256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_bytes), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def unpack(packed: Path, cachedir: Path) -> Dict[str, str]:
    """Unpack ``packed`` with espnet_model_zoo into ``cachedir/<content hash>``; its file dict."""
    return ModelDownloader(cachedir=str(Path(cachedir) / content_hash(Path(packed)))).download_and_unpack(str(packed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packed", required=True, type=Path)
    ap.add_argument("--cachedir", required=True, type=Path)
    ap.add_argument("--wav_scp", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--beam_size", type=int, default=4)
    args = ap.parse_args()

    files = unpack(args.packed, args.cachedir)
    speech2text = Speech2Text(**files, device="cpu", beam_size=args.beam_size, ctc_weight=0.3)
    with open(args.wav_scp, encoding="utf-8") as f:
        utt, path = f.readline().split(maxsplit=1)
    refs = read_keyed_file(args.text)
    speech, fs_hz = sf.read(path.strip(), dtype="float32")
    hyp = speech2text(speech, fs_hz=fs_hz, utt_id=utt)[0][0]
    print(f"decode_packed.py: unpacked {args.packed} into {args.cachedir}")
    print(f"  {utt} ({len(speech) / fs_hz:.2f} s)\n  REF: {refs.get(utt, '')}\n  HYP: {hyp}")


if __name__ == "__main__":
    main()
