#!/usr/bin/env python3
"""Batch samplers side by side: padding, batch sizes, tokens per batch, composition change, build time.

Usage::

    python benchmarks/sampler_benchmark.py [--num_utts 100000] [--build_utts 1000000]
        [--out_dir DIR (default: sampler_benchmark in the system temp dir)] [--samplers numel length folded sorted lhotse dynres]

Samplers: ESPnet's ``numel``, ``length``, ``folded``, ``sorted`` (built with
``espnet2.samplers.build_batch_sampler``), lhotse's ``DynamicBucketingSampler``
(``pip install -e .[bench]``; lhotse's default 10 buckets and buffer of
20,000 cuts, with ``shuffle=True, seed=0``) and ``dynres``.  Every figure comes from
:func:`espnet_dynres.batch_audit.audit_batches` (definitions there).

Corpora (16 kHz, standard frame rate 100 Hz, hop 160 samples):

* ``call_centre``: ``--num_utts`` durations, log-normal with median 22 s and
  sigma 1.0, clipped to 5 s .. 480 s (seed 0);
* ``librispeech_like``: 80 % normal(14.5 s, 1.2 s), 20 % log-uniform on
  1 .. 35 s, clipped to 1 .. 35 s (seed 1);
* ``fsdd_digits``: the recipe's training shape files
  (``egs2/fsdd_digits/asr1/exp/asr_stats_raw_word/train/{speech_shape,text_shape.word}``).

Synthetic token counts are proportional to duration with seeded noise:
``max(1, round(3 tokens/s × duration × exp(N(0, 0.2²))))``; the digit corpus
uses its real word counts.

One frame budget ``F`` (feature frames at 100 Hz, padding included) per corpus
for every sampler: ``numel`` and ``length`` get ``batch_bins = F × 160``
samples (speech shape only, so ``B × longest samples``), lhotse gets
``max_duration = F / 100`` s (lhotse compares ``B × longest duration``),
``dynres`` gets ``batch_bins = F`` frames (``B × T``), ``sorted`` gets
``batch_size = F / mean standard frames`` and ``folded`` ``fold_length`` =
the median utterance (samples) with ``batch_size = F / its frames``.
Batches of ESPnet's samplers are drawn once per run (the trainer reshuffles
only their order); lhotse and dynres are asked for epochs 1 and 2.

Build time at ``--build_utts`` utterances (call-centre durations): seconds from
the shape file on disk (lhotse: from cuts in memory; creating the cuts is
timed separately) to the list of epoch-1 batches.  Results: Markdown on
stdout, JSON in ``--out_dir``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import tempfile
import sys
import time
import warnings
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RECIPE_STATS = REPO / "egs2" / "fsdd_digits" / "asr1" / "exp" / "asr_stats_raw_word" / "train"
FS_HZ = 16000
HOP = 160
SAMPLERS = ("numel", "length", "folded", "sorted", "lhotse", "dynres")
BUDGET_FRAMES = {"call_centre": 60000, "librispeech_like": 20000, "fsdd_digits": 2000}


# ------------------------------------------------------------------ corpora
def call_centre_sec(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(22.0), 1.0, n), 5.0, 480.0)


def librispeech_like_sec(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    read = rng.normal(14.5, 1.2, n)
    spread = np.exp(rng.uniform(np.log(1.0), np.log(35.0), n))
    return np.clip(np.where(rng.random(n) < 0.8, read, spread), 1.0, 35.0)


def tokens_for(duration_sec: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 100)
    noise = np.exp(rng.normal(0.0, 0.2, len(duration_sec)))
    return np.maximum(1, np.round(3.0 * duration_sec * noise)).astype(np.int64)


def write_corpus(out: Path, name: str, duration_sec: np.ndarray, tokens: np.ndarray) -> Tuple[str, str]:
    """``speech_shape`` (samples) and ``text_shape`` (tokens,vocab) under ``out/name``."""
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    keys = [f"{name}-{i:07d}" for i in range(len(duration_sec))]
    samples = np.round(duration_sec * FS_HZ).astype(np.int64)
    (d / "speech_shape").write_text("".join(f"{k} {n}\n" for k, n in zip(keys, samples.tolist())))
    (d / "text_shape").write_text("".join(f"{k} {t},5000\n" for k, t in zip(keys, tokens.tolist())))
    return str(d / "speech_shape"), str(d / "text_shape")


def corpora(out: Path, num_utts: int) -> Dict[str, Tuple[str, str]]:
    cc = call_centre_sec(num_utts)
    ls = librispeech_like_sec(num_utts)
    return {
        "call_centre": write_corpus(out, "call_centre", cc, tokens_for(cc, 0)),
        "librispeech_like": write_corpus(out, "librispeech_like", ls, tokens_for(ls, 1)),
        "fsdd_digits": (str(RECIPE_STATS / "speech_shape"), str(RECIPE_STATS / "text_shape.word")),
    }


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {model}, {os.cpu_count()} cores"


# ----------------------------------------------------------------- samplers
def lhotse_cuts(keys: List[str], num_samples: np.ndarray):
    """A lhotse CutSet of MonoCuts over dummy recordings (no audio), one per utterance."""
    from lhotse import AudioSource, CutSet, MonoCut, Recording

    cuts = []
    for key, n in zip(keys, num_samples.tolist()):
        duration = n / FS_HZ
        recording = Recording(
            id=key,
            sources=[AudioSource(type="file", channels=[0], source=f"/nonexistent/{key}.wav")],
            sampling_rate=FS_HZ,
            num_samples=n,
            duration=duration,
        )
        cuts.append(MonoCut(id=key, start=0.0, duration=duration, channel=0, recording=recording))
    return CutSet.from_cuts(cuts)


def lhotse_batches(cuts, max_duration_sec: float, epochs=(1, 2)):
    """Epoch batches (tuples of cut ids) and ``(wall, CPU)`` seconds to draw the first epoch."""
    from lhotse.dataset.sampling import DynamicBucketingSampler

    start, start_cpu = time.perf_counter(), time.process_time()
    sampler = DynamicBucketingSampler(cuts, max_duration=max_duration_sec, shuffle=True, seed=0)
    out, first = [], None
    for epoch in epochs:
        sampler.set_epoch(epoch)
        out.append([tuple(c.id for c in batch) for batch in sampler])
        if first is None:
            first = (time.perf_counter() - start, time.process_time() - start_cpu)
    return out, first


def espnet_kwargs(batch_type: str, table, budget_frames: int) -> dict:
    from espnet_dynres.core.frame_rate_policy import standard_frame_counts

    std_frames = standard_frame_counts(table.num_samples, HOP)
    if batch_type in ("numel", "length"):
        return dict(batch_bins=budget_frames * HOP)
    if batch_type == "sorted":
        return dict(batch_size=max(1, int(budget_frames / std_frames.mean())))
    if batch_type == "folded":
        fold = int(np.median(table.num_samples))
        return dict(batch_size=max(1, int(budget_frames / int(standard_frame_counts([fold], HOP)[0]))),
                    fold_lengths=[fold])
    raise ValueError(batch_type)


def run_sampler(name: str, speech_shape: str, table, budget_frames: int, policy, cuts=None):
    """``(epoch1, epoch2, plan, (build wall s, build CPU s))`` for one sampler on one corpus; ``plan`` holds
    the ``plans`` argument of ``audit_batches`` (empty for padding samplers)."""
    from espnet_dynres.batch_audit import build_batches

    if name == "lhotse":
        (e1, e2), sec = lhotse_batches(cuts, budget_frames * HOP / FS_HZ)
        return e1, e2, {}, sec
    if name == "dynres":
        built = build_batches("dynres", speech_shape, batch_bins=budget_frames, policy=policy, seed=0)
    else:
        built = build_batches(name, speech_shape, **espnet_kwargs(name, table, budget_frames))
    plan = {} if built.plans is None else dict(plans=built.plans)
    return built.epoch1, built.epoch2, plan, (built.build_time_sec, built.build_cpu_sec)


# --------------------------------------------------------------------- main
def table_rows(results: List[dict]) -> str:
    head = ("| corpus | sampler | batches | utts/batch median (5–95 %) | B×T / F mean, max | padding "
            "| padded batches | tokens/batch median (5–95 %) | tokens CV | composition change | build wall / CPU (s) |")
    rows = [head, "|" + "---|" * 11]
    for r in results:
        bs, tok = r["batch_size"], r["tokens"]
        change = "n/a" if r["composition_change"] is None else f"{r['composition_change']:.3f}"
        rows.append(
            f"| {r['corpus']} | {r['batch_type']} | {r['num_batches']:,} "
            f"| {bs['median']:.0f} ({bs['p5']:.0f}–{bs['p95']:.0f}) "
            f"| {r['frames_mean'] / r['budget_frames']:.2f}, {r['frames_max'] / r['budget_frames']:.2f} "
            f"| {r['padding_fraction']:.4f} "
            f"| {r['num_padded_batches'] if r['batch_type'] == 'dynres' else '–'} "
            f"| {tok['median']:.0f} ({tok['p5']:.0f}–{tok['p95']:.0f}) | {tok['cv']:.3f} | {change} "
            f"| {r['build_time_sec']:.2f} / {r['build_cpu_sec']:.2f} |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num_utts", type=int, default=100000, help="utterances per synthetic corpus")
    ap.add_argument("--build_utts", type=int, default=1000000, help="utterances for the build-time runs (0: skip)")
    ap.add_argument("--out_dir", default=os.path.join(tempfile.gettempdir(), "sampler_benchmark"))
    ap.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    ap.add_argument("--corpora", nargs="+", default=list(BUDGET_FRAMES), choices=list(BUDGET_FRAMES))
    args = ap.parse_args()
    started, load_at_start = time.strftime("%Y-%m-%d %H:%M %Z"), os.getloadavg()[0]
    # lhotse warns about every lone cut longer than max_duration; the audit counts them anyway.
    warnings.filterwarnings("ignore", message="We have exceeded the max_duration", category=UserWarning)
    # ... and that an in-memory CutSet brings no memory benefit (true, and the same for every run here).
    warnings.filterwarnings("ignore", message="You are using DynamicBucketingSampler with an eagerly read CutSet")

    from espnet_dynres.batch_audit import audit_batches, read_shape_table
    from espnet_dynres.core.frame_rate_policy import FrameRatePolicy

    policy = FrameRatePolicy(fs=FS_HZ, hop_length=HOP, min_frame_rate_hz=70.0, max_frame_rate_hz=130.0)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = corpora(out, args.num_utts)
    results = []
    for corpus in args.corpora:
        speech_shape, text_shape = files[corpus]
        table = read_shape_table(speech_shape, text_shape)
        budget = BUDGET_FRAMES[corpus]
        cuts = lhotse_cuts(table.keys, table.num_samples) if "lhotse" in args.samplers else None
        for name in args.samplers:
            e1, e2, plan, sec = run_sampler(name, speech_shape, table, budget, policy, cuts)
            audit = audit_batches(table, e1, e2, hop_length_samples=HOP, fs_hz=FS_HZ, batch_type=name,
                                  build_time_sec=sec[0], **plan)
            row = dict(corpus=corpus, budget_frames=budget, frames_mean=float(audit.batch_frames.mean()),
                       frames_max=int(audit.batch_frames.max()), build_cpu_sec=sec[1], **audit.summary())
            results.append(row)
            print(f"# {corpus} {name}: padding {audit.padding_fraction:.4f}, change {audit.composition_change}, "
                  f"{sec[0]:.2f} s wall, {sec[1]:.2f} s CPU", file=sys.stderr, flush=True)
        del cuts
        gc.collect()

    build = []
    if args.build_utts > 0:
        cc = call_centre_sec(args.build_utts, seed=7)
        speech_shape, text_shape = write_corpus(out, "build_time", cc, tokens_for(cc, 7))
        table = read_shape_table(speech_shape)
        budget = BUDGET_FRAMES["call_centre"]
        for name in args.samplers:
            extra = {}
            if name == "lhotse":
                start = time.process_time()
                cuts = lhotse_cuts(table.keys, table.num_samples)
                extra["cut_creation_cpu_sec"] = time.process_time() - start
                (e1,), sec = lhotse_batches(cuts, budget * HOP / FS_HZ, epochs=(1,))
                del cuts
            else:
                e1, _, _, sec = run_sampler(name, speech_shape, table, budget, policy)
            build.append(dict(sampler=name, num_utts=args.build_utts, build_time_sec=sec[0], build_cpu_sec=sec[1],
                              num_batches=len(e1), load_average_1min=os.getloadavg()[0], **extra))
            print(f"# build {name}: {sec[0]:.2f} s wall, {sec[1]:.2f} s CPU {extra}", file=sys.stderr, flush=True)
            del e1
            gc.collect()

    meta = dict(date=time.strftime("%Y-%m-%d %H:%M %Z"), started=started, machine=machine(),
                load_average_1min=(load_at_start, os.getloadavg()[0]),
                python=platform.python_version(), num_utts=args.num_utts, argv=sys.argv)
    (out / "sampler_benchmark.json").write_text(json.dumps(dict(meta=meta, results=results, build=build), indent=2))
    print(f"{meta['date']}, {meta['machine']}, load average {load_at_start:.1f} at start")
    print(table_rows(results))
    if build:
        print("\n| sampler | utterances | build, wall (s) | build, CPU (s) | load average | note |")
        print("|---|---|---|---|---|---|")
        for b in build:
            note = (f"+ {b['cut_creation_cpu_sec']:.1f} CPU s creating the cuts in memory"
                    if "cut_creation_cpu_sec" in b else "")
            print(f"| {b['sampler']} | {b['num_utts']:,} | {b['build_time_sec']:.1f} | {b['build_cpu_sec']:.1f} "
                  f"| {b['load_average_1min']:.1f} | {note} |")


if __name__ == "__main__":
    main()
