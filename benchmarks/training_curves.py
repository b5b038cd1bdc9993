#!/usr/bin/env python3
"""Per-epoch training curves of ESPnet runs, side by side: a Markdown table and a PNG.

Reads each run's ``train.log`` (ESPnet's ``Nepoch results: [train] k=v, ... [valid] k=v, ...``
lines) and prints, per run and epoch: steps (``total_count``), train and valid CTC loss, valid
CTC CER, valid attention accuracy, the share of steps clipped and the mean gradient norm
(ESPnet's ``clip`` and ``grad_norm`` epoch means), and the cumulative training wall-clock
(ESPnet's per-epoch ``time`` in the ``[train]`` part; validation excluded).

Usage::

    python benchmarks/training_curves.py --run dynres=exp/asr_a --run numel=exp/asr_b \\
        --png docs/figures/curves.png [--title "..."] [--markdown out.md]

A run given as ``name=dir1,dir2`` is several seeds of one arm: the table lists each
(``name/seed-dir``) and the plot draws them in one colour.

ESPnet's logged valid figures are weighted by each model's batch weight (utterances for
``model: espnet``, tokens for ``model: token_normalized``) and are not comparable across
models.  ``--valid_json`` takes the output of ``benchmarks/valid_metrics.py --epochs
name=...`` (keys ``<name>@<epoch>``, or ``<name>/<dir>@<epoch>`` for seeds): the table then
adds its token-weighted attention accuracy and CTC WER, and the plot uses those.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

_EPOCH = re.compile(r"(\d+)epoch results: \[train\] (.*?)\[valid\] (.*)$")
_KV = re.compile(r"([A-Za-z_0-9]+)=([-+0-9.eE]+)")
_TIME = re.compile(r"time=(?:(\d+) hours?, )?(?:(\d+) minutes? and )?([0-9.]+) seconds")
_STAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})")


def _values(text: str) -> Dict[str, float]:
    return {k: float(v) for k, v in _KV.findall(text)}


def _stamp(line: str) -> Optional[float]:
    """Seconds since the epoch of a log line's ``YYYY-MM-DD hh:mm:ss,mmm`` time stamp (None if none)."""
    import datetime

    m = _STAMP.search(line)
    if not m:
        return None
    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    return t.timestamp() + int(m.group(2)) / 1000.0


def _seconds(text: str) -> Optional[float]:
    m = _TIME.search(text)
    if not m:
        return None
    h, mnt, s = m.groups()
    return 3600 * int(h or 0) + 60 * int(mnt or 0) + float(s)


@dataclass
class Run:
    """Per-epoch figures of one training run (one ``train.log``)."""

    name: str
    epochs: List[int] = field(default_factory=list)
    train: List[Dict[str, float]] = field(default_factory=list)
    valid: List[Dict[str, float]] = field(default_factory=list)
    train_seconds: List[float] = field(default_factory=list)
    clip_pct: List[float] = field(default_factory=list)
    grad_norm: List[float] = field(default_factory=list)
    steps: List[int] = field(default_factory=list)
    wall_seconds: List[float] = field(default_factory=list)  # log start -> "Nepoch results" (training + validation)
    fair: Dict[int, Dict[str, float]] = field(default_factory=dict)  # epoch -> valid_metrics.py figures

    @property
    def cumulative_seconds(self) -> List[float]:
        out, total = [], 0.0
        for s in self.train_seconds:
            total += s
            out.append(total)
        return out


def read_run(name: str, exp_dir: Path) -> Run:
    """Parse ``exp_dir/train.log``.

    Raises:
        FileNotFoundError: no ``train.log``; ValueError: no finished epoch in it.
    """
    log = exp_dir / "train.log"
    run = Run(name)
    start = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        stamp = _stamp(line)
        if start is None and stamp is not None:
            start = stamp
        m = _EPOCH.search(line)
        if m:
            run.wall_seconds.append(stamp - start if stamp is not None and start is not None else float("nan"))
            train = _values(m.group(2))
            run.epochs.append(int(m.group(1)))
            run.train.append(train)
            run.valid.append(_values(m.group(3)))
            run.train_seconds.append(_seconds(m.group(2)) or float("nan"))
            run.clip_pct.append(train.get("clip", float("nan")))
            run.grad_norm.append(train.get("grad_norm", float("nan")))
            run.steps.append(int(train.get("total_count", 0)))
    if not run.epochs:
        raise ValueError(f"{log}: no finished epoch ('Nepoch results' line)")
    return run


def markdown(runs: List[Run]) -> str:
    """One row per run and epoch."""
    head = ("| run | epoch | steps (cum.) | train s (cum.) | train loss_ctc | valid loss_ctc | logged valid CTC CER "
            "| logged valid acc | valid acc (all targets) | valid CTC WER | clipped steps | mean grad norm |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [head]
    for run in runs:
        for i, e in enumerate(run.epochs):
            t, v, f = run.train[i], run.valid[i], run.fair.get(e, {})
            fair_acc = f"{f['acc_token']:.3f}" if "acc_token" in f else "—"
            fair_wer = f"{f['ter_ctc_token']:.3f}" if "ter_ctc_token" in f else "—"
            rows.append(
                f"| {run.name} | {e} | {run.steps[i]} | {run.cumulative_seconds[i]:.0f} | {t.get('loss_ctc', float('nan')):.3f} "
                f"| {v.get('loss_ctc', float('nan')):.3f} | {v.get('cer_ctc', float('nan')):.3f} "
                f"| {v.get('acc', float('nan')):.3f} | {fair_acc} | {fair_wer} | {run.clip_pct[i]:.0f} % | {run.grad_norm[i]:.2f} |"
            )
    return "\n".join(rows)


def plot(groups: Dict[str, List[Run]], png: Path, title: str) -> None:
    """Valid CTC CER and attention accuracy against epoch and against training wall-clock."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fair = all(run.fair for runs in groups.values() for run in runs)
    for k, (name, runs) in enumerate(groups.items()):
        c = colours[k % len(colours)]
        for j, run in enumerate(runs):
            label = name if j == 0 else None
            style = "-o" if j == 0 else "--s"
            if fair:
                cer = [run.fair.get(e, {}).get("ter_ctc_token", float("nan")) for e in run.epochs]
                acc = [run.fair.get(e, {}).get("acc_token", float("nan")) for e in run.epochs]
            else:
                cer = [v.get("cer_ctc", float("nan")) for v in run.valid]
                acc = [v.get("acc", float("nan")) for v in run.valid]
            minutes = [s / 60 for s in run.cumulative_seconds]
            axes[0, 0].plot(run.epochs, cer, style, color=c, label=label, ms=4)
            axes[0, 1].plot(run.epochs, acc, style, color=c, label=label, ms=4)
            axes[1, 0].plot(minutes, cer, style, color=c, label=label, ms=4)
            axes[1, 1].plot(minutes, acc, style, color=c, label=label, ms=4)
    for ax in axes[:, 0]:
        ax.set_ylabel("valid CTC greedy WER" if fair else "valid CTC CER (logged)")
        ax.set_yscale("log")
    for ax in axes[:, 1]:
        ax.set_ylabel("valid attention accuracy, all targets" if fair else "valid attention accuracy (logged)")
    for ax in axes[0]:
        ax.set_xlabel("epoch")
    for ax in axes[1]:
        ax.set_xlabel("training wall-clock (min, validation excluded)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 1].legend(fontsize=8)
    fig.suptitle(title + "\n(solid: first seed, dashed: further seeds)", fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", required=True, help="name=exp_dir[,exp_dir2,...] (repeatable)")
    parser.add_argument("--png", type=Path, help="write the curves here")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--title", default="valid curves")
    parser.add_argument("--valid_json", type=Path, help="benchmarks/valid_metrics.py --epochs output")
    args = parser.parse_args(argv)
    fair = json.loads(args.valid_json.read_text(encoding="utf-8")) if args.valid_json else {}
    groups: Dict[str, List[Run]] = {}
    runs: List[Run] = []
    for spec in args.run:
        if "=" not in spec:
            parser.error(f"--run needs name=exp_dir, got {spec!r}")
        name, dirs = spec.split("=", 1)
        paths = [Path(d) for d in dirs.split(",") if d]
        for p in paths:
            run = read_run(name if len(paths) == 1 else f"{name}/{p.name}", p)
            for key, metrics in fair.items():
                prefix, _, epoch = key.rpartition("@")
                if prefix == run.name and epoch.isdigit():
                    run.fair[int(epoch)] = metrics
            runs.append(run)
            groups.setdefault(name, []).append(run)
    table = markdown(runs)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n", encoding="utf-8")
    if args.png:
        plot(groups, args.png, args.title)
        print(f"wrote {args.png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
