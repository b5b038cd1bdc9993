#!/usr/bin/env python3
"""When does a run leave the CTC blank plateau?  The first training step window below a CTC loss per token.

Early in training the CTC branch emits only blanks: its training loss sits on a plateau
(about 2.6 nats per token on the recipe's connected digits) until the encoder starts to
align, then falls within a few dozen steps.  Where that fall happens decides the epoch-2
validation figures (docs/training_dynamics.md).  This script reads ESPnet's periodic
training lines (``<E>epoch:train:<a>-<b>batch: ... loss_ctc=...``, every ``log_interval``
steps) of each run's ``train.log`` and reports the first window whose mean CTC loss per
target token is below ``--threshold``, as the global step at the window's end
(steps of finished epochs, ESPnet's ``total_count``, plus ``b``).

Units: ``model: token_normalized`` logs the CTC loss per token (its batch weight is the
token count), so it is used as is.  ESPnet's ``model: espnet`` / ``model: dynres`` log it
per utterance; it is divided by the training set's mean tokens per utterance
(``--text_shape``, ESPnet's ``text_shape.<token_type>``), an approximation: the window's own
mean may differ by its batches' composition.  Which unit a line is in is read from the log:
lines with ``batch_tokens=`` are per token.

Usage::

    python benchmarks/ctc_plateau_exit.py --text_shape exp/asr_stats_raw_word/train/text_shape.word \\
        --run dynres=exp/asr_dynres --run numel=exp/asr_numel [--threshold 1.5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from training_curves import _EPOCH, _values  # noqa: E402  (the epoch-results and k=v parsers of train.log)

from espnet_dynres.samplers.dynres_batch_sampler import read_shape_file  # noqa: E402  (the one shape-file reader)

_WINDOW = re.compile(r"(\d+)epoch:train:(\d+)-(\d+)batch: (.*)$")


@dataclass
class Exit:
    """Where one run left the plateau.

    Attributes:
        name: the run's name.
        epoch: epoch of the first window below the threshold (None: never).
        window_end: that window's last step within its epoch (ESPnet's ``b`` in ``a-b batch``).
        global_step: steps of the finished epochs before it plus ``window_end``.
        per_token: whether the log was per token (True) or converted from per utterance.
    """

    name: str
    epoch: Optional[int]
    window_end: Optional[int]
    global_step: Optional[int]
    per_token: bool


def mean_tokens_per_utterance(text_shape: Path) -> float:
    """Mean of the first field of an ESPnet shape file (``utt_id N[,V]``): tokens per utterance.

    Raises:
        ValueError: an empty file, a blank or malformed line, or a repeated key (file and line
            named; :func:`espnet_dynres.samplers.dynres_batch_sampler.read_shape_file`).
    """
    return float(read_shape_file(text_shape)[1].mean())


def windows(log_text: str, tokens_per_utt: float) -> Tuple[List[Tuple[int, int, int, float]], bool]:
    """Training windows of a ``train.log``: ``[(epoch, window_end, global_step, ctc_per_token)]``.

    Returns:
        The windows in log order and whether the log was per token.
    """
    out, done, per_token = [], {}, False
    for line in log_text.splitlines():
        m = _EPOCH.search(line)
        if m:
            done[int(m.group(1))] = int(_values(m.group(2)).get("total_count", 0))  # cumulative steps after epoch E
            continue
        m = _WINDOW.search(line)
        if not m:
            continue
        values = _values(m.group(4))
        if "loss_ctc" not in values:
            continue
        epoch, end = int(m.group(1)), int(m.group(3))
        token_line = "batch_tokens" in values
        per_token = per_token or token_line
        value = values["loss_ctc"] if token_line else values["loss_ctc"] / tokens_per_utt
        out.append((epoch, end, done.get(epoch - 1, 0) + end, value))
    return out, per_token


def plateau_exit(name: str, exp_dir: Path, tokens_per_utt: float, threshold: float) -> Exit:
    """The first window of ``exp_dir/train.log`` whose CTC loss per token is below ``threshold``.

    Raises:
        FileNotFoundError: no ``train.log``; ValueError: no training window with ``loss_ctc`` in it.
    """
    rows, per_token = windows((Path(exp_dir) / "train.log").read_text(encoding="utf-8", errors="replace"),
                              tokens_per_utt)
    if not rows:
        raise ValueError(f"{exp_dir}/train.log: no '<E>epoch:train:<a>-<b>batch: ... loss_ctc=' line")
    for epoch, end, step, value in rows:
        if value < threshold:
            return Exit(name, epoch, end, step, per_token)
    return Exit(name, None, None, None, per_token)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="append", required=True, help="name=exp_dir (repeatable)")
    p.add_argument("--text_shape", type=Path, required=True, help="the training set's text_shape.<token_type>")
    p.add_argument("--threshold", type=float, default=1.5, help="CTC loss per token (nats)")
    p.add_argument("--json", type=Path, help="also write the exits here")
    args = p.parse_args(argv)
    tokens = mean_tokens_per_utterance(args.text_shape)
    exits = []
    for spec in args.run:
        name, _, d = spec.partition("=")
        exits.append(plateau_exit(name, Path(d), tokens, args.threshold))
    print(f"| run | first window below {args.threshold:g} nats/token (epoch, step in epoch) | global step | unit |")
    print("|---|---|---|---|")
    for e in exits:
        where = "never" if e.epoch is None else f"epoch {e.epoch}, step {e.window_end}"
        unit = "per token (logged)" if e.per_token else f"per utterance / {tokens:.2f}"
        print(f"| {e.name} | {where} | {e.global_step if e.global_step is not None else '—'} | {unit} |")
    if args.json:
        args.json.write_text(json.dumps([e.__dict__ for e in exits], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
