#!/usr/bin/env python3
"""Where a training step's time goes: data loading, frontend, SpecAugment, normalize, encoder,
decoder, CTC, the rest of the loss, backward, the optimizer step and, for models that have it,
the BatchNorm re-estimate (once per epoch, spread over the epoch's steps), per arm.

Each arm is the ``config.yaml`` an ESPnet training wrote (``<exp>/config.yaml``: every
argument, data paths included).  The model is built fresh from it (``ASRTask.build_model``),
batches come from ESPnet's own training iterator for it (``ASRTask.build_iter_factory``,
the arm's ``batch_type`` and ``num_workers``), and the first ``--steps`` steps after
``--warmup`` are timed with ``time.perf_counter``: forward pre/post hooks on the model's
parts, and around ``next(iterator)``, ``backward()`` and ``optimizer.step()``.  Each
phase is reported in ms per step and in ms per second of audio (speech samples before
padding / ``fs``), so arms with different batch shapes compare per unit of work.

The re-estimate (``model: dynres`` and ``model: token_normalized``) runs once per epoch, when
the trainer calls ``model.eval()``: after the timed steps the profile times that call, over the
sample the timed steps offered it (``batchnorm_restat_batches`` evaluation budgets; the steps
must see more audio than that, or the sample and its cost come out smaller than an epoch's),
and spreads it over an epoch's audio (the sum of the config's first ``train_shape_file`` /
``fs``): phase ``restat`` = re-estimate seconds × audio per step / epoch audio.  Models without
it report 0.
Arms run one after the other in this process (same threads, same machine load).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/step_profile.py --arm numel=exp/asr_a/config.yaml \\
        --arm dynres=exp/asr_b/config.yaml --steps 30 --json profile.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict

import torch
import yaml

PARTS = ("frontend", "specaug", "normalize", "encoder", "decoder", "ctc")
PHASES = ("data",) + PARTS + ("loss_rest", "backward", "optimizer", "restat")


def profile_arm(config: Path, steps: int, warmup: int, seed: int = 0) -> Dict[str, float]:
    """Mean seconds per step of every phase, and the audio seconds and steps measured.

    Raises:
        ValueError: the config's iterator gives fewer than ``warmup + steps`` batches.
    """
    import espnet_dynres  # noqa: F401  (registers the plugin's names)
    from espnet2.tasks.asr import ASRTask
    from espnet2.train.distributed_utils import DistributedOption
    from espnet2.torch_utils.set_all_random_seed import set_all_random_seed

    args = argparse.Namespace(**yaml.safe_load(config.read_text()))
    set_all_random_seed(seed)
    model = ASRTask.build_model(args).train()
    reestimate = getattr(ASRTask.trainer.build_options(args), "batchnorm_reestimate", None)  # the plugin's trainer
    optimizers = ASRTask.build_optimizers(args, model)
    iterator = iter(ASRTask.build_iter_factory(args, DistributedOption(distributed=False), mode="train").build_iter(1))
    fs = float(getattr(model.frontend, "fs", 16000)) if model.frontend is not None else 16000.0

    spent: Dict[str, float] = defaultdict(float)
    started: Dict[str, float] = {}
    recording = [False]

    def pre(name):
        def hook(_module, _inputs):
            started[name] = time.perf_counter()
        return hook

    calls: Dict[str, int] = defaultdict(int)

    def post(name):
        def hook(_module, _inputs, _output):
            if recording[0]:
                spent[name] += time.perf_counter() - started[name]
                calls[name] += 1
        return hook

    for name in PARTS:
        part = getattr(model, name, None)
        if part is not None:
            part.register_forward_pre_hook(pre(name))
            part.register_forward_hook(post(name))
    audio_sec = 0.0
    for i in range(warmup + steps):
        recording[0] = i >= warmup
        t0 = time.perf_counter()
        try:
            _keys, batch = next(iterator)
        except StopIteration:
            raise ValueError(f"{config}: only {i} batches in an epoch; lower --warmup/--steps") from None
        t1 = time.perf_counter()
        batch = {k: v for k, v in batch.items() if not k.endswith("utt_id")}
        before = dict(spent)
        with reestimate.collecting(model) if reestimate is not None else contextlib.nullcontext():
            loss, _stats, _weight = model(**batch)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float(getattr(args, "grad_clip", 5.0)))
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
        t4 = time.perf_counter()
        if recording[0]:
            parts = sum(spent[k] - before.get(k, 0.0) for k in PARTS)
            spent["data"] += t1 - t0
            spent["loss_rest"] += (t2 - t1) - parts
            spent["backward"] += t3 - t2
            spent["optimizer"] += t4 - t3
            audio_sec += float(batch["speech_lengths"].sum()) / fs
    recording[0] = False  # the re-estimate's own encoder passes are its phase, not the step's
    restat_utts = len(reestimate.sample) if reestimate is not None and reestimate.sample is not None else 0
    t0 = time.perf_counter()
    if reestimate is not None:
        reestimate.run(model)  # the re-estimate, as the trainer runs it before validation
    restat_sec = time.perf_counter() - t0 if restat_utts else 0.0
    epoch_audio_sec = epoch_audio_seconds(args, fs)
    out = {k: spent.get(k, 0.0) / steps for k in PHASES}
    out["restat"] = restat_sec * (audio_sec / steps) / epoch_audio_sec
    out["total"] = sum(out[k] for k in PHASES)
    out["audio_sec_per_step"] = audio_sec / steps
    out["steps"] = steps
    out["restat_sec_per_epoch"] = restat_sec
    out["restat_sample_utts"] = restat_utts
    out["epoch_audio_sec"] = epoch_audio_sec
    out["frontend_calls_per_step"] = calls["frontend"] / steps  # 1: only the timed steps were recorded
    return out


def epoch_audio_seconds(args: argparse.Namespace, fs: float) -> float:
    """Seconds of training audio in an epoch: the sum of the first ``train_shape_file``'s first
    dimension (``<utt> <samples>[,<dims>]``, samples, or frames for extracted features, whose
    ``fs`` is then the frame rate) / ``fs``.

    Raises:
        ValueError: the config names no ``train_shape_file`` or it lists no utterance.
    """
    shape_files = getattr(args, "train_shape_file", None) or []
    if not shape_files:
        raise ValueError("the config names no train_shape_file; the re-estimate cannot be spread over an epoch")
    total = 0.0
    for line in Path(shape_files[0]).read_text().splitlines():
        fields = line.split()
        if len(fields) == 2:
            total += float(fields[1].split(",")[0])
    if total <= 0:
        raise ValueError(f"{shape_files[0]}: no utterance listed")
    return total / fs


def markdown(results: Dict[str, Dict[str, float]]) -> str:
    arms = list(results)
    lines = ["| phase | " + " | ".join(f"{a}: ms/step | {a}: ms per audio s" for a in arms) + " |",
             "|---|" + "---|---|" * len(arms)]
    for phase in PHASES + ("total",):
        cells = []
        for a in arms:
            r = results[a]
            cells += [f"{1000 * r[phase]:.1f}", f"{1000 * r[phase] / r['audio_sec_per_step']:.2f}"]
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    cells = []
    for a in arms:
        cells += [f"{results[a]['audio_sec_per_step']:.1f}", ""]
    lines.append("| audio s per step | " + " | ".join(cells) + " |")
    cells = []
    for a in arms:
        r = results[a]
        cells += [f"{r['restat_sec_per_epoch']:.1f} s, {r['restat_sample_utts']:.0f} utts", ""]
    lines.append("| re-estimate per epoch | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", action="append", required=True, help="name=<exp>/config.yaml (repeatable)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1, help="alternate the arms this many times; report the mean")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    arms = {}
    for spec in args.arm:
        name, sep, path = spec.partition("=")
        if not sep or not Path(path).is_file():
            p.error(f"--arm needs name=existing config.yaml, got {spec!r}")
        arms[name] = Path(path)
    runs: Dict[str, list] = defaultdict(list)
    for _ in range(args.repeats):
        for name, config in arms.items():  # alternate, so slow drifts of the machine hit every arm
            runs[name].append(profile_arm(config, args.steps, args.warmup))
            print(f"{name}: {runs[name][-1]['total'] * 1000:.0f} ms/step", file=sys.stderr, flush=True)
    results = {name: {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]} for name, rs in runs.items()}
    table = markdown(results)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
