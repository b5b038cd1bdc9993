#!/usr/bin/env python3
"""Validation accuracy and CTC CER of trained checkpoints, weighted the same way for every model.

ESPnet's epoch summaries weight each validation batch by the model's batch weight: the
number of utterances ``B`` for ``model: espnet``, the number of target tokens ``N`` for
``model: token_normalized``.  Validation batches differ in length (short utterances come
many to a batch), and attention accuracy differs strongly by length, so ``valid acc`` and
``valid cer_ctc`` from the two models' logs are different averages and must not be
compared.  This script decodes nothing; it runs each checkpoint in eval mode on the
validation utterances one at a time and reports, for every model alike:

* ``acc_token``: attention accuracy over all decoder targets (``<eos>`` included), i.e.
  correct targets / targets (token-weighted);
* ``acc_utt``: the mean of the utterances' attention accuracies (utterance-weighted);
* ``acc_by_position``: ``acc_token`` per decoder target position (1-based, ``<eos>`` included, bins
  of ``POSITION_BINS``), with the number of targets in each: whether the decoder finds the
  later tokens of long utterances as well as the first ones;
* ``ter_ctc_token``: CTC greedy-search token error rate (edit distance over reference
  tokens; with ``token_type: word`` this is the CTC WER), over all reference tokens;
* ``ter_ctc_utt``: the mean of the utterances' CTC token error rates;
* ``att_loss_target``: the attention criterion (ESPnet's label-smoothed KL divergence, the
  model's ``lsm_weight``) summed over all decoder targets and divided by their number
  (``<eos>`` included), i.e. the same per-target figure for both models, where the logs'
  ``loss_att`` is per utterance (``model: espnet``) or per transcript token without
  ``<eos>`` (``model: token_normalized``);
* ``eos_prediction_share``: the share of decoder targets at which the decoder's argmax is
  ``<eos>`` (teacher forcing).  A decoder that has not yet learned anything beyond the
  token frequencies predicts one token everywhere: ``<eos>`` (accuracy = the ``<eos>``
  share of the targets) or one digit (accuracy = that digit's share).

Usage::

    python benchmarks/valid_metrics.py --valid_dir dump/raw/dev \\
        --model stock=exp/asr_a/2epoch.pth --model tok=exp/asr_b/2epoch.pth [--json out.json]
    python benchmarks/valid_metrics.py --valid_dir dump/raw/dev \\
        --epochs dynres=exp/asr_a/epochs --epochs numel=exp/asr_b/epochs --json curves.json

    python benchmarks/valid_metrics.py ... --restat_train_dir dump/raw/train [--restat_batches 6]

With ``--restat_train_dir``, every checkpoint's BatchNorm statistics are first re-estimated at
the standard rate the way ``model: dynres``/``token_normalized`` does it before each
evaluation (:func:`espnet_dynres.asr.batchnorm_reestimate.reestimate_batchnorm`, over a sample of
``--restat_batches`` of the run's evaluation budgets of training utterances, drawn with a fixed
seed), for any model, ``model: espnet`` included: the
figures of a checkpoint as if its model had re-estimated them.

(``config.yaml`` is taken from the checkpoint's directory, or its parent for ``--epochs``,
which evaluates every ``<N>epoch.pth`` in the directory; ESPnet prunes those that are
not among the best, so copy them aside while training runs.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict

import jiwer
import torch

import espnet_dynres  # noqa: F401  (registers the plugin's names)
from espnet.nets.pytorch_backend.nets_utils import th_accuracy
from espnet.nets.pytorch_backend.transformer.add_sos_eos import add_sos_eos
from espnet2.tasks.asr import ASRTask

from espnet_dynres.bin.reestimate_batchnorm import restat_from_data_dir


# Decoder target positions (1-based; the last target of an utterance is ``<eos>``) grouped for
# ``acc_by_position``: (first, last) inclusive, ``None`` = no upper end.
POSITION_BINS = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 10), (11, 20), (21, None))


POSITION_LABELS = tuple(f"{a}+" if b is None else (str(a) if a == b else f"{a}-{b}") for a, b in POSITION_BINS)


def position_bin(position: int) -> str:
    """The ``POSITION_BINS`` label (``"4-5"``, ``"21+"``) of a 1-based decoder target position.

    Raises:
        ValueError: ``position`` < 1.
    """
    for (first, last), label in zip(POSITION_BINS, POSITION_LABELS):
        if position >= first and (last is None or position <= last):
            return label
    raise ValueError(f"target position {position} < 1")


def speech_text_iterator(train_args, data_dir: Path, batch_size: int, key_file: Path = None):
    """ESPnet's streaming iterator over ``data_dir/{wav.scp,text}`` with the model's own preprocessing
    and padding collate (speech at the standard rate, in file order); ``key_file`` limits it to those ids."""
    return ASRTask.build_streaming_iterator(
        data_path_and_name_and_type=[(str(data_dir / "wav.scp"), "speech", "sound"),
                                     (str(data_dir / "text"), "text", "text")],
        dtype="float32", batch_size=batch_size, key_file=str(key_file) if key_file else None, num_workers=0,
        preprocess_fn=ASRTask.build_preprocess_fn(train_args, False),
        collate_fn=ASRTask.build_collate_fn(train_args, False), inference=False,
    )


def restat_batchnorm(model, train_args, train_dir: Path, num_batches: int, seed: int = 0) -> int:
    """Re-estimate ``model``'s BatchNorm statistics as the plugin's models do before evaluation, over
    a sample of ``train_dir`` as large as ``num_batches`` of the run's evaluation budgets
    (:func:`espnet_dynres.bin.reestimate_batchnorm.restat_from_data_dir`); returns the layers changed.

    Raises:
        ValueError: see ``restat_from_data_dir`` (a malformed or unreadable ``wav.scp``/``feats.scp``).
    """
    from espnet_dynres.glue.trainer import restat_budget

    return restat_from_data_dir(model, restat_budget(train_args, model), train_dir, num_batches, seed)


@torch.no_grad()
def evaluate(model_file: Path, valid_dir: Path, config: Path = None, restat_train_dir: Path = None,
             restat_batches: int = 6, device: str = "cpu") -> Dict[str, float]:
    """Token- and utterance-weighted valid figures of one checkpoint (eval mode, batch size 1), after
    re-estimating its BatchNorm statistics over ``restat_batches`` evaluation budgets of
    ``restat_train_dir`` if given (:func:`restat_batchnorm`).  ``device`` (``"cpu"``, ``"cuda"``)
    holds the model and each batch; the figures are the same up to floating-point rounding."""
    if config is None:  # next to the checkpoint, or one level up (a side directory of epoch checkpoints)
        config = model_file.parent / "config.yaml"
        config = config if config.exists() else model_file.parent.parent / "config.yaml"
    model, train_args = ASRTask.build_model_from_file(config, model_file, device)
    model.eval()
    if restat_train_dir is not None:
        restat_batchnorm(model, train_args, restat_train_dir, restat_batches)
    iterator = speech_text_iterator(train_args, valid_dir, batch_size=1)
    correct = targets = 0.0
    errors = ref_tokens = 0.0
    att_loss_sum = eos_predictions = 0.0
    acc_utts, ter_utts = [], []
    by_position: Dict[str, list] = {}  # bin -> [correct, targets]
    for _keys, batch in iterator:
        batch = {k: v.to(device) for k, v in batch.items() if not k.endswith("utt_id")}
        d = float(batch["text_lengths"].sum()) + 1.0  # decoder targets incl. <eos>
        # One encoder pass for both branches (eval mode: the standard rate, as decoding).
        enc, enc_lens = model.encode(batch["speech"], batch["speech_lengths"])  # (1, T_enc, D), (1,)
        if isinstance(enc, tuple):
            enc = enc[0]
        ys_in, ys_out = add_sos_eos(batch["text"], model.sos, model.eos, model.ignore_id)  # (1, U + 1) each
        dec_out, _ = model.decoder(enc, enc_lens, ys_in, batch["text_lengths"] + 1)  # (1, U + 1, V)
        acc = th_accuracy(dec_out.view(-1, dec_out.size(-1)), ys_out, model.ignore_id)  # ESPnet's `acc` stat
        correct += acc * d
        targets += d
        acc_utts.append(acc)
        att_loss = float(model.criterion_att(dec_out, ys_out))  # sum over targets / B (B = 1), or their mean
        att_loss_sum += att_loss * d if model.criterion_att.normalize_length else att_loss
        eos_predictions += float((dec_out.argmax(-1) == model.eos).sum())
        for position, ok in enumerate((dec_out.argmax(-1) == ys_out)[0].tolist(), start=1):
            cell = by_position.setdefault(position_bin(position), [0, 0])
            cell[0] += int(ok)
            cell[1] += 1
        if model.ctc is not None and model.ctc_weight > 0:
            best = model.ctc.argmax(enc)[0, : int(enc_lens[0])]  # (T_enc,) greedy path
            hyp = [int(t) for t in torch.unique_consecutive(best) if int(t) != model.blank_id]
            ref = [int(t) for t in batch["text"][0, : int(batch["text_lengths"][0])]]
            words = lambda ids: " ".join(f"t{i}" for i in ids) or "<empty>"
            out = jiwer.process_words(words(ref), words(hyp))
            n_err = out.substitutions + out.deletions + out.insertions
            errors += n_err
            ref_tokens += len(ref)
            ter_utts.append(n_err / max(len(ref), 1))
    out = {"utterances": len(acc_utts), "acc_token": correct / targets, "acc_utt": sum(acc_utts) / len(acc_utts),
           "att_loss_target": att_loss_sum / targets, "eos_prediction_share": eos_predictions / targets,
           "acc_by_position": {label: {"acc": by_position[label][0] / by_position[label][1],
                                       "targets": by_position[label][1]}
                               for label in POSITION_LABELS if label in by_position}}
    if ter_utts:
        out |= {"ter_ctc_token": errors / ref_tokens, "ter_ctc_utt": sum(ter_utts) / len(ter_utts)}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--valid_dir", type=Path, required=True)
    parser.add_argument("--model", action="append", default=[], help="name=path/to/checkpoint.pth (repeatable)")
    parser.add_argument("--epochs", action="append", default=[],
                        help="name=dir holding <N>epoch.pth files, config.yaml in dir or its parent (repeatable)")
    parser.add_argument("--restat_train_dir", type=Path, default=None,
                        help="re-estimate BatchNorm statistics over utterances of this data dir first")
    parser.add_argument("--restat_batches", type=int, default=6)
    parser.add_argument("--device", default="cpu", help="cpu or cuda: where the model and batches run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if not args.model and not args.epochs:
        parser.error("give --model or --epochs")
    for spec in args.model + args.epochs:
        if "=" not in spec:
            parser.error(f"expected name=path, got {spec!r}")
    jobs = []
    for spec in args.model:
        name, path = spec.split("=", 1)
        jobs.append((name, Path(path), None))
    for spec in args.epochs:
        name, d = spec.split("=", 1)
        d = Path(d)
        config = d / "config.yaml" if (d / "config.yaml").exists() else d.parent / "config.yaml"
        files = sorted(d.glob("*epoch.pth"), key=lambda p: int(p.name.split("epoch")[0]))
        if not files:
            parser.error(f"no <N>epoch.pth in {d}")
        jobs += [(f"{name}@{p.name.split('epoch')[0]}", p, config) for p in files]
    results = {}
    for name, path, config in jobs:
        results[name] = evaluate(path, args.valid_dir, config, args.restat_train_dir, args.restat_batches,
                                 args.device)
        r = results[name]
        print(f"{name:24s} acc_token={r['acc_token']:.3f} acc_utt={r['acc_utt']:.3f} "
              f"ter_ctc_token={r.get('ter_ctc_token', float('nan')):.3f} ter_ctc_utt={r.get('ter_ctc_utt', float('nan')):.3f} "
              f"att_loss_target={r['att_loss_target']:.3f} eos_prediction_share={r['eos_prediction_share']:.3f}",
              flush=True)
        print(f"{'':24s} acc by target position: " + ", ".join(
            f"{label} {cell['acc']:.3f} ({cell['targets']})" for label, cell in r["acc_by_position"].items()), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
