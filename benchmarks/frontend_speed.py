#!/usr/bin/env python3
"""Forward time of the dynres frontend (hop, resample) versus ESPnet's DefaultFrontend.

Usage: python benchmarks/frontend_speed.py [--repeats 10] [--warmup 2] [--threads 2] [--device cpu|cuda]
                                           [--fsdd_dir ../shared/data/fsdd/recordings]

Identical real batches (FSDD digits, 16 kHz, zero-padded as ESPnet's collate
pads them) go through each frontend in turn, interleaved, in one run, after
``--warmup`` untimed rounds; the figures are medians over ``repeats x batches``
forwards and their ratio to DefaultFrontend's.  All frontends are in training
mode with autograd on, as in an ESPnet training step: ``dynres`` takes its
dynamic path (every utterance brought to the batch's one frame count ``T``),
DefaultFrontend computes the padded batch at 100 Hz.  Two clocks: wall time
(``perf_counter``; on a GPU after ``synchronize``) and, on CPU, the process's
CPU time (``process_time``), which other processes on a shared machine disturb
less.  Prints the setting (threads, load average) and a Markdown table.
"""

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # benchmarks/common.py, also when this file is imported by path
    sys.path.insert(0, str(HERE))

from common import DEFAULT_FSDD_DIR, pad_batch, real_utterances  # noqa: E402
from espnet2.asr.frontend.default import DefaultFrontend  # noqa: E402
from espnet_dynres.asr.frontend.dynres import DynResFrontend  # noqa: E402
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy  # noqa: E402

BASELINE = "DefaultFrontend (100 Hz)"


def batches(device, fsdd_dir: Path = DEFAULT_FSDD_DIR):
    """Three batches whose durations span the 70-130 Hz clamp (so dynres has one T)."""
    policy = FrameRatePolicy(fs=16000, hop_length=160)
    out = []
    for concat, count in ((2, 32), (5, 16), (12, 6)):
        wavs = real_utterances(count, concat=concat, start=100 * concat, fsdd_dir=fsdd_dir)
        wavs = sorted(wavs, key=len)
        while True:  # drop the shortest until the clamp ranges of all overlap (one common frame count)
            lo, hi = policy.frame_count_ranges([len(w) for w in wavs])
            if lo.max() <= hi.min():
                break
            wavs = wavs[1:]
        speech, lengths = pad_batch(wavs)
        out.append((speech.to(device), lengths.to(device)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds over all batches and frontends first")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fsdd_dir", type=Path, default=DEFAULT_FSDD_DIR, help="the FSDD recordings (*.wav, 8 kHz)")
    args = ap.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    conf = dict(fs=16000, n_fft=512, win_length=400, hop_length=160, n_mels=80)
    frontends = {
        BASELINE: DefaultFrontend(**conf, frontend_conf=None).to(device).train(),
        "dynres hop": DynResFrontend(**conf, method="hop").to(device).train(),
        "dynres resample": DynResFrontend(**conf, method="resample").to(device).train(),
    }
    data = batches(device, args.fsdd_dir)
    wall = {name: [] for name in frontends}
    cpu = {name: [] for name in frontends}
    frames = {name: 0 for name in frontends}
    for round_ in range(args.warmup + args.repeats):
        for name, fe in frontends.items():
            for speech, lengths in data:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start_wall, start_cpu = time.perf_counter(), time.process_time()
                feats, _ = fe(speech, lengths)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                if round_ >= args.warmup:
                    wall[name].append(time.perf_counter() - start_wall)
                    cpu[name].append(time.process_time() - start_cpu)
                    frames[name] += feats.shape[0] * feats.shape[1]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"device: {args.device} ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads), torch {torch.__version__}, {len(data)} batches "
        f"(B = {', '.join(str(s.size(0)) for s, _ in data)}) x {args.repeats} repeats after {args.warmup} "
        f"warm-up rounds; load average before the table (1/5/15 min): {load}"
    )
    base_wall, base_cpu = statistics.median(wall[BASELINE]), statistics.median(cpu[BASELINE])
    show_cpu = device.type == "cpu"
    head = "| frontend | frames computed per round | median wall (ms) | wall ratio |"
    head += " median CPU time (ms) | CPU-time ratio |" if show_cpu else ""
    print(head + "\n|---|---|---|---|" + ("---|---|" if show_cpu else ""))
    for name in frontends:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        row = f"| {name} | {frames[name] // args.repeats} | {1000 * w:.1f} | {w / base_wall:.2f}x |"
        row += f" {1000 * c:.1f} | {c / base_cpu:.2f}x |" if show_cpu else ""
        print(row)


if __name__ == "__main__":
    main()
