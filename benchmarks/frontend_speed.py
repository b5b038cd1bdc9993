#!/usr/bin/env python3
"""Forward time of the dynres frontend (hop, resample) versus ESPnet's DefaultFrontend.

Usage: python benchmarks/frontend_speed.py [--repeats 10] [--device cpu|cuda]

Identical real batches (FSDD digits, 16 kHz) go through each frontend in turn,
interleaved, in one run; the reported figure is the ratio of median times to
DefaultFrontend's.  ``dynres`` runs in training mode (autograd on, the dynamic
path); DefaultFrontend computes the same batch at 100 Hz.  Writes a Markdown
table to stdout.
"""

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from espnet2.asr.frontend.default import DefaultFrontend  # noqa: E402
from espnet_dynres.asr.frontend.dynres import DynResFrontend  # noqa: E402
from espnet_dynres.frame_rate_policy import FrameRatePolicy  # noqa: E402
from factory import pad_batch, real_utterances  # noqa: E402


def batches(device):
    """Three batches whose durations span the 70-130 Hz clamp (so dynres has one T)."""
    policy = FrameRatePolicy()
    out = []
    for concat, count in ((2, 32), (5, 16), (12, 6)):
        wavs = real_utterances(count, concat=concat, start=100 * concat)
        wavs = sorted(wavs, key=len)
        while policy.common_frame_count([len(w) for w in wavs]) is None:
            wavs = wavs[1:]
        speech, lengths = pad_batch(wavs)
        out.append((speech.to(device), lengths.to(device)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    device = torch.device(args.device)
    conf = dict(fs=16000, n_fft=512, win_length=400, hop_length=160, n_mels=80)
    frontends = {
        "DefaultFrontend (100 Hz)": DefaultFrontend(**conf, frontend_conf=None).to(device).eval(),
        "dynres hop": DynResFrontend(**conf, method="hop").to(device).train(),
        "dynres resample": DynResFrontend(**conf, method="resample").to(device).train(),
    }
    data = batches(device)
    times = {name: [] for name in frontends}
    for _ in range(args.repeats):
        for name, fe in frontends.items():
            for speech, lengths in data:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                fe(speech, lengths)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["DefaultFrontend (100 Hz)"])
    threads = torch.get_num_threads()
    print(f"device: {args.device} ({platform.processor() or platform.machine()}, {threads} threads), "
          f"{len(data)} batches x {args.repeats} repeats")
    print("| frontend | median forward (ms) | ratio to DefaultFrontend |\n|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {1000 * med:.1f} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()
