#!/usr/bin/env python3
"""Which per-step scalars reached TensorBoard: grad_norm, batch_tokens, batch_size, loss, the drop counts.

Usage: python benchmarks/loss_normalization/tensorboard_tags.py EXP_DIR/tensorboard/train [...]
"""

import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

KEYS = ("grad_norm", "batch_tokens", "batch_size", "loss", "ctc_infeasible", "empty_transcripts")

for event_dir in sys.argv[1:]:
    acc = EventAccumulator(event_dir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = [t for t in acc.Tags()["scalars"] if any(k in t for k in KEYS)]
    rows = [f"{t}: {len(acc.Scalars(t))} points, last {acc.Scalars(t)[-1].value:.4g}" for t in tags]
    print(f"{event_dir}\n  " + ("\n  ".join(rows) if rows else "(none of " + ", ".join(KEYS) + ")"))
