#!/usr/bin/env python3
"""Does the Conformer's BatchNorm carry a train/eval mismatch? Valid figures before and after
re-estimating its running statistics at the standard frame rate.

The Conformer's convolution module normalises with ``BatchNorm1d`` over (batch, time).
Under ``batch_type: dynres`` the training batches are unpadded, at 70–130 Hz, and can be
1–3 long utterances; validation and decoding run padded at the standard 100 Hz with the
running statistics.  This script loads a trained model (any ``model``, ESPnet's included),
computes validation loss, CTC CER and attention accuracy with the checkpoint's statistics,
re-estimates them over ``--num_train`` training utterances exactly as ``model: dynres`` /
``token_normalized`` do before every evaluation
(:class:`espnet_dynres.asr.batchnorm_restat.BatchNormRestat`: standard rate, eval mode,
padding-free batches, one pass per layer), and computes the validation figures again.  If
the two agree, the checkpoint's statistics already match what evaluation sees.  (An earlier
version re-estimated with BatchNorm's cumulative average over padded batches of 16, which
mixes padding frames and per-batch variances into the statistics.)

Usage::

    python benchmarks/batchnorm_restat.py --exp exp/asr_train_asr_conformer_dynres_cpu \\
        --model_file valid.acc.ave.pth --train_dir dump/raw/train --valid_dir dump/raw/dev \\
        [--num_train 600 --batch_size 16]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict

import torch

import espnet_dynres  # noqa: F401  (registers the plugin's names)
from espnet2.tasks.asr import ASRTask
from valid_metrics import restat_batchnorm, speech_text_iterator  # benchmarks/ is this script's first sys.path entry


@torch.no_grad()
def evaluate(model, train_args, valid_dir: Path, batch_size: int) -> Dict[str, float]:
    """Valid ``loss``, ``loss_ctc``, ``cer_ctc`` and ``acc`` in eval mode, each batch weighted by its
    target tokens whatever the model's own batch weight (so models compare)."""
    model.eval()
    totals: Dict[str, float] = {}
    weight_sum = 0.0
    for _keys, batch in speech_text_iterator(train_args, valid_dir, batch_size):
        batch = {k: v for k, v in batch.items() if not k.endswith("utt_id")}
        _, stats, _ = model(**batch)
        w = float(batch["text_lengths"].sum())
        weight_sum += w
        for k in ("loss", "loss_ctc", "cer_ctc", "acc"):
            if stats.get(k) is not None:
                totals[k] = totals.get(k, 0.0) + float(stats[k]) * w
    return {k: v / weight_sum for k, v in totals.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exp", type=Path, required=True, help="experiment dir with config.yaml")
    parser.add_argument("--model_file", default="valid.acc.ave.pth")
    parser.add_argument("--train_dir", type=Path, required=True)
    parser.add_argument("--valid_dir", type=Path, required=True)
    parser.add_argument("--num_train", type=int, default=128, help="training utterances for the re-estimate")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model, train_args = ASRTask.build_model_from_file(args.exp / "config.yaml", args.exp / args.model_file, "cpu")
    before = evaluate(model, train_args, args.valid_dir, args.batch_size)
    count = restat_batchnorm(model, args.train_dir, args.num_train)
    after = evaluate(model, train_args, args.valid_dir, args.batch_size)
    result = {"exp": str(args.exp), "model_file": args.model_file, "batchnorm_layers": count,
              "running_stats": before, "restat_100hz": after}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
