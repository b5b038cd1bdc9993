#!/usr/bin/env python3
"""Loss stability: does a run's gradient norm swing with the composition of its batches?

Every arm is an ESPnet experiment directory trained with ``log_interval: 1``, so its
``train.log`` has one line per training step (``Nepoch:train:i-ibatch: ...``) with ESPnet's
``grad_norm`` (the total gradient norm *before* clipping), ``clip`` and the losses.  A loss that
is a sum over the utterances of a batch (ESPnet's ``model: espnet``/``model: dynres``: per
utterance, summed over its tokens) has gradients whose size follows the tokens per utterance of
the batch; a per-token loss (``model: token_normalized``) should not.  Per arm this reports:

* **warm-up rule**: figures marked "after warm-up" use the steps whose optimizer step is
  ``> warmup_steps`` (``scheduler_conf.warmup_steps`` of the arm's ``config.yaml``, or
  ``--warmup_steps``; optimizer step = ``ceil(iteration / accum_grad)``, iteration counted over
  the whole run from ESPnet's cumulative ``total_count``);
* ``grad_norm_cv``: std / mean of the per-step ``grad_norm`` after warm-up (population std,
  ``ddof=0``; non-finite norms left out and counted);
* ``grad_norm_p95``: the 95th percentile of ``grad_norm`` after warm-up (linear interpolation),
  for a control arm whose ``grad_clip`` rarely acts (set it above this);
* ``clipped_share``: share of the steps after warm-up with ``grad_norm > grad_clip``
  (``clip_logged_share``: the same from ESPnet's own ``clip`` field, as a check);
* ``corr_grad_tokens_per_utt``: Pearson correlation, after warm-up, of ``grad_norm`` with the
  batch's target tokens per utterance ``N / B``; ``corr_log_grad_log_tokens_per_utt``: that of
  ``log grad_norm`` with ``log(N / B)`` (steps with ``N = 0`` left out);
* the **per-token training loss** of each step: ``loss`` as logged for ``model:
  token_normalized``, ``loss * B / max(N, 1)`` for any other model (ESPnet's per-utterance
  loss), and per epoch its token-weighted mean ``sum_t loss_t N_t / sum_t N_t`` over the
  epoch's steps (the epoch's total nats over its target tokens);
* ``loss_oscillation``: the median over consecutive pairs of steps, both after warm-up, of
  ``|log(loss_t / loss_{t-1})|`` of the per-token training loss (0.69 = a factor of 2 from one
  step to the next);
* per epoch: the valid figures of ``benchmarks/valid_metrics.py`` where
  ``<exp>/<N>epoch.valid_metrics.json`` or ``<exp>/epochs/<N>epoch.valid_metrics.json``
  exists (``ter_ctc_token``: CTC greedy token error rate, the CTC WER with word tokens;
  ``acc_token``: token-weighted attention accuracy);
* the test WER, overall and per duration bin (``--duration_edges``, default ``10 60``: bins
  ``[0, 10)``, ``[10, 60)``, ``[60, inf)`` s), from the first ``--decode_glob`` match (default
  ``decode_*/test/score/per_utt.tsv``, columns of ``egs2/fsdd_digits/asr1/local/score.py``):
  ``100 * sum(sub + del + ins) / sum(num_ref_words)``; durations from ``--utt2dur``, else from
  the file's ``duration_sec`` column;
* ``wall_clock_sec``: from the first step line's time stamp to the last analysed
  ``Nepoch results`` line's (validation included).

Only finished epochs (those with an ``Nepoch results`` line) are analysed; the step lines of an
epoch still running are ignored.

**Token counts from a paired arm.**  Only ``model: token_normalized`` logs ``batch_tokens`` (N)
and ``batch_size`` (B) per step.  Two arms trained with the same ``batch_type``, ``batch_bins``
and ``seed`` on the same data see the same batches in the same order, so
``--arm NAME=EXPDIR:TOKENS_FROM`` takes the counts of arm ``TOKENS_FROM`` step by step.  The
configs' ``batch_type``/``batch_bins``/``seed`` must agree and every common epoch must have the
same number of steps in both, else it stops with an error naming both arms; epochs the lender
has not finished are left out of the borrower's figures (noted).

**Token counts from the run's own plan.**  ``--arm NAME=EXPDIR:plan`` needs no partner: the
counts come from the batches ESPnet's training iterator gives the run, rebuilt from its
``config.yaml`` (``ASRTask.build_iter_factory``, ``build_iter(epoch)`` per finished epoch, with
this plugin's batch types registered; no audio is read) and the target tokens per utterance of its
text shape file (``train_shape_file``, the ``text_shape*`` entry: the preprocessed target length
the model gets as ``text_lengths``).  Relative paths in ``config.yaml`` are read from the current
directory, as ESPnet reads them (run it from the recipe directory).  An epoch whose plan has
another number of batches than its step lines stops it with an error.  (Single-process runs:
under DDP a step's counts are those of every rank together, which one process's log does not
hold.)

**Seeds.**  Give ``--arm`` once per seed with the same NAME: the seed label is the config's
``seed``, or ``NAME@SEED=EXPDIR`` sets it.  ``TOKENS_FROM`` is ``OTHER`` (the run of OTHER with
the same seed label, or its only run) or ``OTHER@SEED``.  The report lists each seed and the
mean over seeds per arm (and per epoch).

Usage::

    python benchmarks/loss_stability.py --out_dir loss_stability \\
        --arm tokennorm=exp/asr_tta_numel_tokennorm_s0 \\
        --arm espnet=exp/asr_tta_numel_espnet_s0:tokennorm \\
        --arm tokennorm=exp/asr_tta_numel_tokennorm_s1 \\
        --arm espnet=exp/asr_tta_numel_espnet_s1:tokennorm \\
        --utt2dur dump/raw/test/utt2dur [--duration_edges 10 60] [--warmup_steps 500]

Outputs in ``--out_dir``: ``loss_stability.json`` (every figure, per arm and seed, and the
means), ``loss_stability.md`` (the per-arm table and the per-epoch tables) and
``loss_stability.png`` (grad_norm against tokens per utterance, log-log, with the ``grad_clip``
lines; per-token training loss per step; valid CTC error and attention accuracy per epoch).

Log format assumed: ESPnet's ``trainer`` lines ``[host] YYYY-MM-DD hh:mm:ss,mmm (trainer:NNN)
INFO: ...``; ``key=value`` pairs are read with a strict number pattern, so pairs whose ", "
separator is missing (seen in real logs written by parallel trainings) still parse.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import yaml

STEP_RE = re.compile(r"(\d+)epoch:train:(\d+)-(\d+)batch:(.*)$")
EPOCH_RE = re.compile(r"(\d+)epoch results: \[train\](.*?)\[valid\]([^\[]*)")
NUMBER = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]\d+)?|-?inf|nan"
KV_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(" + NUMBER + r")")
STAMP_RE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})")
NAN = float("nan")


class ReportError(Exception):
    """An input problem; ``main`` stops with its message and no traceback."""


def key_values(text: str) -> Dict[str, float]:
    """``key=number`` pairs of an ESPnet stats text (also where the ", " between two is missing)."""
    return {k: float(v) for k, v in KV_RE.findall(text)}


def time_stamp(line: str) -> Optional[datetime.datetime]:
    m = STAMP_RE.search(line)
    if not m:
        return None
    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    return t + datetime.timedelta(milliseconds=int(m.group(2)))


@dataclass
class Epoch:
    """One finished epoch: its step lines' values (in order), its results line."""

    epoch: int
    steps: List[Dict[str, float]]
    train: Dict[str, float]
    valid: Dict[str, float]
    stamp: Optional[datetime.datetime]


@dataclass
class TrainLog:
    path: Path
    epochs: List[Epoch]
    first_step_stamp: Optional[datetime.datetime]
    notes: List[str] = field(default_factory=list)


def read_train_log(exp_dir: Path) -> TrainLog:
    """The finished epochs of ``exp_dir/train.log`` with their per-step values.

    Raises:
        ReportError: no ``train.log``; no per-step lines (``log_interval`` not 1); no finished
        epoch; an epoch whose step lines do not add up to ESPnet's ``total_count``.
    """
    path = exp_dir / "train.log"
    if not path.is_file():
        raise ReportError(f"{path}: no train.log; is {exp_dir} an ESPnet experiment directory (stage 11 run)?")
    steps: Dict[int, List[Dict[str, float]]] = {}
    results: Dict[int, Tuple[Dict[str, float], Dict[str, float], Optional[datetime.datetime]]] = {}
    averaged, first, notes = 0, None, []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = STEP_RE.search(line)
        if m:
            epoch, a, b = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if a != b:
                averaged += 1
                continue
            if a == 1 and steps.get(epoch):  # the epoch starts again: a resumed run appended to the log
                notes.append(f"epoch {epoch} restarts in the log (resumed run): its earlier step lines are dropped")
                for e in [e for e in steps if e >= epoch]:
                    steps.pop(e)
                    results.pop(e, None)
            steps.setdefault(epoch, []).append(key_values(m.group(4)))
            if first is None:
                first = time_stamp(line)
            continue
        m = EPOCH_RE.search(line)
        if m:
            results[int(m.group(1))] = (key_values(m.group(2)), key_values(m.group(3)), time_stamp(line))
    log_interval = _config(exp_dir).get("log_interval")
    fix = "retrain with log_interval: 1 in the training config (or --log_interval 1)"
    if averaged and steps:
        raise ReportError(f"{path}: {averaged} step lines average several steps (Nepoch:train:a-bbatch, a < b) "
                          f"besides per-step ones: log_interval changed within the run; {fix}")
    if not steps:
        why = (f"its {averaged} train lines average several steps each" if averaged
               else "no 'Nepoch:train:i-ibatch' line at all")
        raise ReportError(f"{path}: no per-step lines ({why}; config log_interval: {log_interval}): "
                          f"this tool needs one line per step; {fix}")
    epochs, previous_count = [], None
    for e in sorted(results):
        if e not in steps:
            previous_count = results[e][0].get("total_count")
            continue
        train, valid, stamp = results[e]
        count = train.get("total_count")
        expected = None
        if count is not None:
            expected = count - previous_count if previous_count is not None else (count if e == 1 else None)
        if expected is not None and int(round(expected)) != len(steps[e]):
            raise ReportError(f"{path}: epoch {e} has {len(steps[e])} step lines but ESPnet counted "
                              f"{int(round(expected))} steps (total_count): lines are missing or log_interval "
                              f"was not 1 for the whole epoch; {fix}")
        epochs.append(Epoch(e, steps[e], train, valid, stamp))
        previous_count = count
    unfinished = sorted(set(steps) - set(results))
    if unfinished:
        notes.append(f"epoch(s) {unfinished} not finished in the log: their "
                     f"{sum(len(steps[e]) for e in unfinished)} step lines are left out")
    if not epochs:
        raise ReportError(f"{path}: no finished epoch ('Nepoch results' line) with step lines yet")
    return TrainLog(path, epochs, first, notes)


def _config(exp_dir: Path) -> dict:
    path = exp_dir / "config.yaml"
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


@dataclass
class RunSpec:
    """One ``--arm`` argument: an arm name, a seed label, an experiment dir, whose counts to use."""

    name: str
    seed: str
    exp_dir: Path
    tokens_from: Optional[str] = None  # "OTHER" or "OTHER@SEED"
    config: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.name}@{self.seed}"


def parse_arms(specs: List[str]) -> List[RunSpec]:
    """``NAME[@SEED]=EXPDIR[:TOKENS_FROM]`` per ``--arm``; seed labels default to the config's ``seed``."""
    raw = []
    for spec in specs:
        head, sep, value = spec.partition("=")
        if not sep or not head or not value:
            raise ReportError(f"--arm needs NAME[@SEED]=EXPDIR[:TOKENS_FROM], got {spec!r}")
        name, _, seed = head.partition("@")
        tokens_from = None
        if not Path(value).is_dir() and ":" in value:
            value, _, tokens_from = value.rpartition(":")
        raw.append((name, seed or None, Path(value), tokens_from or None, spec))
    names = {r[0] for r in raw}
    runs: List[RunSpec] = []
    for name, seed, exp_dir, tokens_from, spec in raw:
        if not exp_dir.is_dir():
            raise ReportError(f"--arm {spec!r}: no directory {exp_dir}")
        if name == PLAN:
            raise ReportError(f"--arm {spec!r}: {PLAN!r} is reserved (TOKENS_FROM {PLAN!r}); name the arm otherwise")
        if tokens_from is not None and tokens_from != PLAN and tokens_from.partition("@")[0] not in names:
            raise ReportError(f"--arm {spec!r}: TOKENS_FROM {tokens_from!r} is not one of the arms {sorted(names)}")
        config = _config(exp_dir)
        if seed is None:
            seed = str(config.get("seed", len([r for r in runs if r.name == name])))
        if any(r.name == name and r.seed == seed for r in runs):
            raise ReportError(f"--arm {spec!r}: arm {name!r} already has a run with seed label {seed!r}; "
                              f"name the seeds explicitly: --arm {name}@SEED=EXPDIR")
        runs.append(RunSpec(name, seed, exp_dir, tokens_from, config))
    return runs


def lender_of(run: RunSpec, runs: List[RunSpec]) -> RunSpec:
    name, _, seed = run.tokens_from.partition("@")
    candidates = [r for r in runs if r.name == name]
    if seed:
        found = [r for r in candidates if r.seed == seed]
    else:
        found = [r for r in candidates if r.seed == run.seed] or (candidates if len(candidates) == 1 else [])
    if not found:
        raise ReportError(f"arm {run.label}: no run {run.tokens_from!r} to take token counts from "
                          f"(runs of {name!r}: {[r.label for r in candidates]}); write {name}@SEED")
    if found[0] is run:
        raise ReportError(f"arm {run.label}: takes its token counts from itself")
    return found[0]


def _nested(config: dict, *keys):
    for k in keys:
        if not isinstance(config, dict):
            return None
        config = config.get(k)
    return config


def borrowed_counts(run: RunSpec, log: TrainLog, lender: RunSpec, lender_log: TrainLog) -> List[str]:
    """Attach ``lender``'s per-step ``batch_tokens``/``batch_size`` to ``log``'s steps (in place).

    Epochs the lender has not finished are dropped from ``log``; returns the notes.

    Raises:
        ReportError: the arms' batches differ (config, or steps per epoch), the lender has no counts,
        or ``run`` logs counts of its own.
    """
    both = f"arm {run.label} and arm {lender.label} (its TOKENS_FROM)"
    if any("batch_tokens" in s for e in log.epochs for s in e.steps):
        raise ReportError(f"arm {run.label} logs batch_tokens itself; drop ':{run.tokens_from}' from its --arm")
    for key in ("batch_type", "batch_bins", "seed"):
        mine, theirs = run.config.get(key), lender.config.get(key)
        if mine is not None and theirs is not None and mine != theirs:
            raise ReportError(f"{both}: config {key} is {mine!r} vs {theirs!r}, so they did not see the same "
                              "batches and the token counts cannot be borrowed")
    theirs = {e.epoch: e for e in lender_log.epochs}
    notes, kept = [], []
    for e in log.epochs:
        other = theirs.get(e.epoch)
        if other is None:
            notes.append(f"epoch {e.epoch} left out: {lender.label} (token counts) has not finished it")
            continue
        if len(other.steps) != len(e.steps):
            raise ReportError(f"{both}: epoch {e.epoch} has {len(e.steps)} steps in {run.label} "
                              f"({log.path}) but {len(other.steps)} in {lender.label} ({lender_log.path}); "
                              "not the same batches (same data, batch_type, batch_bins and seed?), so "
                              f"{lender.label}'s token counts do not describe {run.label}'s steps")
        for mine, lent in zip(e.steps, other.steps):
            if "batch_tokens" not in lent or "batch_size" not in lent:
                raise ReportError(f"{both}: {lender_log.path} epoch {e.epoch} has step lines without "
                                  "batch_tokens/batch_size (only model: token_normalized logs them)")
            mine["batch_tokens"], mine["batch_size"] = lent["batch_tokens"], lent["batch_size"]
        kept.append(e)
    if not kept:
        raise ReportError(f"{both}: no common finished epoch")
    log.epochs = kept
    return notes


PLAN = "plan"  # TOKENS_FROM that takes the counts from the run's own planned batches


def planned_batches(exp_dir: Path, epochs: List[int]) -> Dict[int, List[List[str]]]:
    """The utterance ids of every training batch, in training order, of each of ``epochs``, as
    ESPnet's training iterator of the run in ``exp_dir`` (its ``config.yaml``) builds them."""
    import espnet_dynres  # noqa: F401  (registers the plugin's batch types with ESPnet)
    from espnet2.tasks.asr import ASRTask
    from espnet2.train.distributed_utils import DistributedOption

    config = _config(exp_dir)
    if not config:
        raise ReportError(f"{exp_dir}: no config.yaml, so its batches cannot be planned again (':{PLAN}')")
    try:
        factory = ASRTask.build_iter_factory(argparse.Namespace(**config), DistributedOption(distributed=False),
                                             mode="train")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ReportError(f"{exp_dir / 'config.yaml'}: cannot rebuild its training iterator ({exc}); run from the "
                          "directory its relative paths start from (the recipe directory)") from None
    out = {}
    for epoch in epochs:
        loader = factory.build_iter(epoch)
        if loader.batch_sampler is not None:  # ESPnet's iterators: lists of ids
            out[epoch] = [list(batch) for batch in loader.batch_sampler]
        else:  # batch_type dynres: one item per planned batch
            out[epoch] = [list(batch.keys) for batch in loader.sampler]
    return out


def text_shape_tokens(run: RunSpec) -> Dict[str, int]:
    """Target tokens per utterance from the run's text shape file (``key L[,V]``)."""
    shapes = [Path(f) for f in run.config.get("train_shape_file") or [] if "text_shape" in Path(f).name]
    if not shapes:
        raise ReportError(f"arm {run.label}: its config.yaml names no text shape file in train_shape_file "
                          f"({run.config.get('train_shape_file')}), so ':{PLAN}' has no token counts")
    if not shapes[0].is_file():
        raise ReportError(f"arm {run.label}: no text shape file {shapes[0]} (relative paths start from the current "
                          "directory: run from the recipe directory)")
    tokens = {}
    for number, line in enumerate(shapes[0].read_text(encoding="utf-8").splitlines(), 1):
        key, _, shape = line.strip().partition(" ")
        if not key:
            continue
        try:
            tokens[key] = int(shape.split(",")[0])
        except ValueError:
            raise ReportError(f"{shapes[0]}:{number}: expected 'utt_id L[,V]', got {line!r}") from None
    return tokens


def planned_counts(run: RunSpec, log: TrainLog) -> List[str]:
    """Attach per-step ``batch_tokens``/``batch_size`` from the run's own planned batches
    (:func:`planned_batches`, :func:`text_shape_tokens`) to ``log``'s steps (in place); returns notes.

    Raises:
        ReportError: the run logs counts itself, a batch holds an utterance without a shape line, or
        an epoch's plan has another number of batches than its step lines.
    """
    if any("batch_tokens" in s for e in log.epochs for s in e.steps):
        raise ReportError(f"arm {run.label} logs batch_tokens itself; drop ':{PLAN}' from its --arm")
    tokens = text_shape_tokens(run)
    plans = planned_batches(run.exp_dir, [e.epoch for e in log.epochs])
    for e in log.epochs:
        plan = plans[e.epoch]
        if len(plan) != len(e.steps):
            raise ReportError(f"arm {run.label}: epoch {e.epoch} has {len(e.steps)} steps in {log.path} but its "
                              f"config.yaml plans {len(plan)} batches: not the data or options it was trained with")
        for step, batch in zip(e.steps, plan):
            missing = [k for k in batch if k not in tokens]
            if missing:
                raise ReportError(f"arm {run.label}: utterance {missing[0]} of epoch {e.epoch} has no line in its "
                                  "text shape file")
            step["batch_tokens"], step["batch_size"] = float(sum(tokens[k] for k in batch)), float(len(batch))
    return [f"token counts from its planned batches (config.yaml, {len(log.epochs)} epochs)"]


def _cv(x: np.ndarray) -> float:
    return float(np.std(x) / np.mean(x)) if x.size and np.mean(x) != 0 else NAN


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.std(x) == 0 or np.std(y) == 0:
        return NAN
    return float(np.corrcoef(x, y)[0, 1])


def valid_metrics(exp_dir: Path, epoch: int) -> Dict[str, float]:
    """``benchmarks/valid_metrics.py`` figures of one epoch's checkpoint, as written next to it."""
    for path in (exp_dir / f"{epoch}epoch.valid_metrics.json", exp_dir / "epochs" / f"{epoch}epoch.valid_metrics.json"):
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            return dict(data.get("metrics", data))
    return {}


def bin_labels(edges: List[float]) -> List[str]:
    bounds = [0.0] + list(edges) + [math.inf]
    return [f"[{lo:g}, {'inf' if math.isinf(hi) else f'{hi:g}'}) s" for lo, hi in zip(bounds, bounds[1:])]


def read_utt2dur(path: Path) -> Dict[str, float]:
    if not path.is_file():
        raise ReportError(f"--utt2dur {path}: no such file")
    out = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            if len(fields) != 2:
                raise ValueError
            out[fields[0]] = float(fields[1])
        except ValueError:
            raise ReportError(f"{path}:{n}: expected 'utt_id seconds', got {line!r}") from None
    return out


def test_wer(exp_dir: Path, pattern: str, edges: List[float], utt2dur: Optional[Dict[str, float]]) -> Optional[dict]:
    """Test WER overall and per duration bin from the first ``pattern`` match under ``exp_dir``, or None."""
    found = sorted(exp_dir.glob(pattern))
    if not found:
        return None
    path = found[0]
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    need = ("utt_id", "duration_sec", "num_ref_words", "sub", "del", "ins")
    if any(k not in header for k in need):
        raise ReportError(f"{path}: expected the columns {need} of local/score.py's per_utt.tsv, got {header}")
    col = {k: header.index(k) for k in need}
    bounds = [0.0] + list(edges) + [math.inf]
    errors, words, utts = [0] * (len(bounds) - 1), [0] * (len(bounds) - 1), [0] * (len(bounds) - 1)
    total_err = total_words = 0
    have_durations = True
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        f = line.split("\t")
        utt = f[col["utt_id"]]
        err = int(f[col["sub"]]) + int(f[col["del"]]) + int(f[col["ins"]])
        ref = int(f[col["num_ref_words"]])
        total_err += err
        total_words += ref
        if utt2dur is not None:
            if utt not in utt2dur:
                raise ReportError(f"{path}:{n}: utterance {utt} is not in --utt2dur (the test set's utt2dur?)")
            dur = utt2dur[utt]
        elif f[col["duration_sec"]] not in ("NA", ""):
            dur = float(f[col["duration_sec"]])
        else:
            have_durations = False
            continue
        for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            if lo <= dur < hi:
                errors[i] += err
                words[i] += ref
                utts[i] += 1
    rate = lambda e, w: 100.0 * e / w if w else None  # noqa: E731
    out = {"path": str(path), "wer": rate(total_err, total_words), "errors": total_err, "ref_words": total_words,
           "other_decodings": [str(p) for p in found[1:]]}
    if have_durations:
        out["by_duration"] = [{"bin": label, "utts": u, "ref_words": w, "wer": rate(e, w)}
                              for label, e, w, u in zip(bin_labels(edges), errors, words, utts)]
    return out


def analyse(run: RunSpec, log: TrainLog, args, utt2dur, notes: List[str]) -> dict:
    """Every per-run figure of the module docstring, with the per-step series for the plot."""
    cfg = run.config
    grad_clip = cfg.get("grad_clip")
    grad_clip = float(grad_clip) if grad_clip is not None else NAN
    accum = int(cfg.get("accum_grad") or 1)
    warmup = args.warmup_steps if args.warmup_steps is not None else _nested(cfg, "scheduler_conf", "warmup_steps")
    if warmup is None:
        notes.append("no scheduler_conf.warmup_steps in config.yaml: warm-up taken as 0 steps")
        warmup = 0
    token_normalized = cfg.get("model") == "token_normalized"
    iteration, grad, clip, loss, tokens, size, epoch_of = [], [], [], [], [], [], []
    count_before = None
    for e in log.epochs:
        total = e.train.get("total_count")
        start = (total - len(e.steps)) if total is not None else (count_before or 0)
        for i, s in enumerate(e.steps, 1):
            iteration.append(int(round(start)) + i)
            grad.append(s.get("grad_norm", NAN))
            clip.append(s.get("clip", NAN))
            loss.append(s.get("loss", NAN))
            tokens.append(s.get("batch_tokens", NAN))
            size.append(s.get("batch_size", NAN))
            epoch_of.append(e.epoch)
        count_before = (total if total is not None else (count_before or 0) + len(e.steps))
    it, g, c, lo = (np.array(v, dtype=float) for v in (iteration, grad, clip, loss))
    n, b, ep = np.array(tokens, dtype=float), np.array(size, dtype=float), np.array(epoch_of)
    has_counts = bool(np.isfinite(n).all() and np.isfinite(b).all())
    if token_normalized:
        per_token = lo
    elif has_counts:
        per_token = lo * b / np.maximum(n, 1.0)
    else:
        per_token = np.full_like(lo, NAN)
        notes.append("per-utterance loss and no token counts: no per-token loss or N/B correlation; "
                     "give --arm NAME=EXPDIR:TOKEN_ARM with a token_normalized arm of the same batches")
    after = np.ceil(it / accum) > warmup
    if not after.any():
        notes.append(f"no step after warm-up ({int(it.max())} iterations, warmup_steps={warmup}): the after-warm-up "
                     "figures are empty; set --warmup_steps to use fewer")
    finite = np.isfinite(g)
    sel = after & finite
    ratio = n / b if has_counts else np.full_like(g, NAN)
    lsel = sel & (ratio > 0) & (g > 0) if has_counts else sel & False
    pairs = after[1:] & after[:-1] & (per_token[1:] > 0) & (per_token[:-1] > 0)
    osc = np.abs(np.log(per_token[1:][pairs] / per_token[:-1][pairs])) if pairs.any() else np.array([])
    source = "own" if has_counts and run.tokens_from is None else (
        f"from {run.tokens_from}" if has_counts else None)
    epochs = []
    for e in log.epochs:
        m = ep == e.epoch
        es = m & sel
        if has_counts:
            epoch_loss = float(np.sum(per_token[m] * n[m]) / np.sum(n[m])) if np.sum(n[m]) > 0 else NAN
        else:
            epoch_loss = NAN
        v = valid_metrics(run.exp_dir, e.epoch)
        epochs.append({
            "epoch": e.epoch, "steps": int(m.sum()), "steps_after_warmup": int((m & after).sum()),
            "per_token_train_loss": epoch_loss,
            "grad_norm_cv": _cv(g[es]), "clipped_share": float(np.mean(g[es] > grad_clip)) if es.any() else NAN,
            "valid_ter_ctc_token": v.get("ter_ctc_token", NAN), "valid_acc_token": v.get("acc_token", NAN),
            "wall_clock_sec": _seconds(log.first_step_stamp, e.stamp),
        })
    return {
        "exp_dir": str(run.exp_dir), "model": cfg.get("model"), "batch_type": cfg.get("batch_type"),
        "ctc_weight": _nested(cfg, "model_conf", "ctc_weight"), "seed_config": cfg.get("seed"),
        "grad_clip": grad_clip, "warmup_steps": warmup, "accum_grad": accum,
        "tokens_source": source,
        "loss_scale": "per token (logged)" if token_normalized else "per utterance, x B / max(N, 1)",
        "steps": int(it.size), "steps_after_warmup": int(after.sum()), "nonfinite_grad_steps": int((~finite).sum()),
        "grad_norm_mean": float(np.mean(g[sel])) if sel.any() else NAN,
        "grad_norm_cv": _cv(g[sel]),
        "grad_norm_p95": float(np.percentile(g[sel], 95)) if sel.any() else NAN,
        "clipped_share": float(np.mean(g[sel] > grad_clip)) if sel.any() else NAN,
        "clip_logged_share": float(np.mean(c[sel] > 0)) if sel.any() and np.isfinite(c[sel]).all() else NAN,
        "corr_grad_tokens_per_utt": _corr(g[sel], ratio[sel]) if has_counts else NAN,
        "corr_log_grad_log_tokens_per_utt": _corr(np.log(g[lsel]), np.log(ratio[lsel])) if has_counts else NAN,
        "loss_oscillation": float(np.median(osc)) if osc.size else NAN,
        "last_epoch": log.epochs[-1].epoch,
        "wall_clock_sec": _seconds(log.first_step_stamp, log.epochs[-1].stamp),
        "epochs": epochs,
        "test": test_wer(run.exp_dir, args.decode_glob, args.duration_edges, utt2dur),
        "notes": log.notes + notes,
        "series": {"iteration": it.tolist(), "grad_norm": g.tolist(), "tokens_per_utt": ratio.tolist(),
                   "per_token_loss": per_token.tolist(), "after_warmup": after.tolist()},
    }


def _seconds(start: Optional[datetime.datetime], end: Optional[datetime.datetime]) -> float:
    return (end - start).total_seconds() if start is not None and end is not None else NAN


SUMMARY_KEYS = ("steps_after_warmup", "grad_norm_mean", "grad_norm_cv", "grad_norm_p95", "clipped_share", "clip_logged_share",
                "corr_grad_tokens_per_utt", "corr_log_grad_log_tokens_per_utt", "loss_oscillation",
                "wall_clock_sec")
EPOCH_KEYS = ("per_token_train_loss", "grad_norm_cv", "clipped_share", "valid_ter_ctc_token", "valid_acc_token",
              "wall_clock_sec")


def _mean(values) -> float:
    v = [x for x in values if x is not None and x == x]
    return float(np.mean(v)) if v else NAN


def seed_mean(runs: Dict[str, dict], edges: List[float]) -> dict:
    """Mean over an arm's seeds of the scalar figures, the last epoch's, the test WERs, and per epoch."""
    rs = list(runs.values())
    out = {"seeds": len(rs), **{k: _mean(r[k] for r in rs) for k in SUMMARY_KEYS}}
    out["last_epoch"] = {k: _mean(r["epochs"][-1][k] for r in rs) for k in EPOCH_KEYS}
    tests = [r["test"] for r in rs if r.get("test")]
    out["test_wer"] = _mean(t["wer"] for t in tests) if tests else NAN
    out["test_wer_by_duration"] = [_mean(t["by_duration"][i]["wer"] for t in tests if "by_duration" in t)
                                   for i in range(len(edges) + 1)]
    per_epoch = []
    for epoch in sorted({row["epoch"] for r in rs for row in r["epochs"]}):
        rows = [row for r in rs for row in r["epochs"] if row["epoch"] == epoch]
        per_epoch.append({"epoch": epoch, "seeds": len(rows), **{k: _mean(row[k] for row in rows) for k in EPOCH_KEYS}})
    out["epochs"] = per_epoch
    return out


def _f(x, spec=".3f", scale=1.0) -> str:
    if x is None or x != x:
        return "—"
    s = format(x * scale, spec)
    return s[1:] if s.startswith("-") and float(s) == 0 else s  # no "-0.000"


def markdown(results: dict) -> str:
    labels = bin_labels(results["duration_edges"])
    lines = [f"Warm-up rule: {results['warmup_rule']}", "",
             "| arm | seed | steps after warm-up | grad-norm CV | clipped % | corr(g, N/B) | corr(log g, log N/B) "
             "| loss oscillation | per-token train loss, last epoch | valid CTC TER, last epoch "
             "| valid acc, last epoch | test WER % | " + " | ".join(f"WER % {b}" for b in labels)
             + " | wall-clock s | grad-norm p95 (grad_clip) | token counts |",
             "|" + "---|" * (16 + len(labels))]
    for arm, entry in results["arms"].items():
        for seed, r in entry["runs"].items():
            last, t = r["epochs"][-1], r.get("test") or {}
            bins = [d["wer"] for d in t.get("by_duration", [])] or [None] * len(labels)
            lines.append(
                f"| {arm} | {seed} | {r['steps_after_warmup']} | {_f(r['grad_norm_cv'])} "
                f"| {_f(r['clipped_share'], '.1f', 100)} | {_f(r['corr_grad_tokens_per_utt'])} "
                f"| {_f(r['corr_log_grad_log_tokens_per_utt'])} | {_f(r['loss_oscillation'])} "
                f"| {_f(last['per_token_train_loss'])} | {_f(last['valid_ter_ctc_token'])} "
                f"| {_f(last['valid_acc_token'])} | {_f(t.get('wer'), '.2f')} | "
                + " | ".join(_f(x, ".2f") for x in bins)
                + f" | {_f(r['wall_clock_sec'], '.0f')} | {_f(r['grad_norm_p95'], '.2f')} ({_f(r['grad_clip'], 'g')}) "
                f"| {r['tokens_source'] or '—'} |")
        m = entry.get("mean")
        if m and m["seeds"] > 1:
            lines.append(
                f"| **{arm}** | mean of {m['seeds']} | {_f(m['steps_after_warmup'], '.0f')} | {_f(m['grad_norm_cv'])} "
                f"| {_f(m['clipped_share'], '.1f', 100)} | {_f(m['corr_grad_tokens_per_utt'])} "
                f"| {_f(m['corr_log_grad_log_tokens_per_utt'])} | {_f(m['loss_oscillation'])} "
                f"| {_f(m['last_epoch']['per_token_train_loss'])} | {_f(m['last_epoch']['valid_ter_ctc_token'])} "
                f"| {_f(m['last_epoch']['valid_acc_token'])} | {_f(m['test_wer'], '.2f')} | "
                + " | ".join(_f(x, ".2f") for x in m["test_wer_by_duration"])
                + f" | {_f(m['wall_clock_sec'], '.0f')} | {_f(m['grad_norm_p95'], '.2f')} | |")
    lines += ["", "Definitions: " + " ".join(f"*{k}*: {v}" for k, v in results["definitions"].items()), "",
              "Per epoch (grad-norm CV and clipped share over the epoch's steps after warm-up):", "",
              "| arm | seed | epoch | steps | after warm-up | per-token train loss | grad-norm CV | clipped % "
              "| valid CTC TER | valid acc | wall-clock s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, entry in results["arms"].items():
        for seed, r in entry["runs"].items():
            for e in r["epochs"]:
                lines.append(f"| {arm} | {seed} | {e['epoch']} | {e['steps']} | {e['steps_after_warmup']} "
                             f"| {_f(e['per_token_train_loss'])} | {_f(e['grad_norm_cv'])} "
                             f"| {_f(e['clipped_share'], '.1f', 100)} | {_f(e['valid_ter_ctc_token'])} "
                             f"| {_f(e['valid_acc_token'])} | {_f(e['wall_clock_sec'], '.0f')} |")
    if any(entry["mean"]["seeds"] > 1 for entry in results["arms"].values()):
        lines += ["", "Mean over seeds per epoch:", "",
                  "| arm | epoch | seeds | per-token train loss | grad-norm CV | clipped % | valid CTC TER "
                  "| valid acc | wall-clock s |", "|---|---|---|---|---|---|---|---|---|"]
        for arm, entry in results["arms"].items():
            for e in entry["mean"]["epochs"]:
                lines.append(f"| {arm} | {e['epoch']} | {e['seeds']} | {_f(e['per_token_train_loss'])} "
                             f"| {_f(e['grad_norm_cv'])} | {_f(e['clipped_share'], '.1f', 100)} "
                             f"| {_f(e['valid_ter_ctc_token'])} | {_f(e['valid_acc_token'])} "
                             f"| {_f(e['wall_clock_sec'], '.0f')} |")
    notes = [f"- {arm}@{seed}: {note}" for arm, entry in results["arms"].items()
             for seed, r in entry["runs"].items() for note in r["notes"]]
    if notes:
        lines += ["", "Notes:", ""] + notes
    return "\n".join(lines)


def plot(results: dict, series: Dict[Tuple[str, str], dict], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers, styles = "o^sDv<>", ["-", "--", ":", "-."]
    clips: Dict[float, List[str]] = {}  # grad_clip -> arms
    valid_seen = {"ter": False, "acc": False}
    for k, (arm, entry) in enumerate(results["arms"].items()):
        c = colours[k % len(colours)]
        for j, (seed, r) in enumerate(entry["runs"].items()):
            s = series[(arm, seed)]
            label = arm if j == 0 else None
            g, x, after = (np.array(s[key], dtype=float) for key in ("grad_norm", "tokens_per_utt", "after_warmup"))
            after = after.astype(bool)
            ok = np.isfinite(x) & (x > 0) & (g > 0)
            if ok.any():
                axes[0, 0].scatter(x[ok & after], g[ok & after], s=9, color=c, marker=markers[j % len(markers)],
                                   alpha=0.7, label=label)
                axes[0, 0].scatter(x[ok & ~after], g[ok & ~after], s=6, color=c, marker=markers[j % len(markers)],
                                   alpha=0.15)
            if r["grad_clip"] == r["grad_clip"] and arm not in clips.get(r["grad_clip"], []):
                clips.setdefault(r["grad_clip"], []).append(arm)
            valid_seen["ter"] |= any(e["valid_ter_ctc_token"] == e["valid_ter_ctc_token"] for e in r["epochs"])
            valid_seen["acc"] |= any(e["valid_acc_token"] == e["valid_acc_token"] for e in r["epochs"])
            axes[0, 1].plot(s["iteration"], s["per_token_loss"], styles[j % len(styles)], color=c, lw=0.7,
                            label=label)
            ep = [e["epoch"] for e in r["epochs"]]
            axes[1, 0].plot(ep, [e["valid_ter_ctc_token"] for e in r["epochs"]], styles[j % len(styles)],
                            marker=markers[j % len(markers)], color=c, ms=4, label=label)
            axes[1, 1].plot(ep, [e["valid_acc_token"] for e in r["epochs"]], styles[j % len(styles)],
                            marker=markers[j % len(markers)], color=c, ms=4, label=label)
    for clip, arms in sorted(clips.items()):
        axes[0, 0].axhline(clip, color="grey", ls=":", lw=1.2, label=f"grad_clip {clip:g} ({', '.join(arms)})")
    for ax, key in ((axes[1, 0], "ter"), (axes[1, 1], "acc")):
        if not valid_seen[key]:
            ax.text(0.5, 0.5, "no <N>epoch.valid_metrics.json\n(benchmarks/time_to_accuracy.py writes them)",
                    transform=ax.transAxes, ha="center", va="center", fontsize=9, color="grey")
    axes[0, 0].set(xscale="log", yscale="log", xlabel="target tokens per utterance in the batch (N / B)",
                   ylabel="grad_norm (before clipping)",
                   title="gradient norm vs batch composition (faint: warm-up steps)")
    axes[0, 1].set(yscale="log", xlabel="training iteration", ylabel="training loss per target token",
                   title="per-token training loss per step")
    axes[1, 0].set(xlabel="epoch", ylabel="valid CTC greedy token error rate", title="valid CTC error")
    axes[1, 1].set(xlabel="epoch", ylabel="valid attention accuracy (all targets)", title="valid attention accuracy")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(title + "  (one colour per arm; markers/line styles: seeds)", fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def _clean(x):
    """NaN/inf as JSON null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


DEFINITIONS = {
    "grad-norm CV": "std/mean (ddof=0) of the per-step grad_norm (before clipping) after warm-up;",
    "clipped %": "share of steps after warm-up with grad_norm > grad_clip;",
    "grad-norm p95": "95th percentile of grad_norm after warm-up (a grad_clip above it rarely acts);",
    "corr(g, N/B)": "Pearson correlation after warm-up of grad_norm with the batch's target tokens per utterance;",
    "corr(log g, log N/B)": "the same of their logarithms;",
    "per-token loss": "`loss` as logged for model: token_normalized, else loss * B / max(N, 1); per epoch its "
                      "token-weighted mean sum(loss_t N_t) / sum(N_t);",
    "loss oscillation": "median over consecutive steps after warm-up of |log(loss_t / loss_{t-1})| of the "
                        "per-token loss;",
    "valid": "benchmarks/valid_metrics.py figures of the epoch's checkpoint (ter_ctc_token, acc_token);",
    "test WER": "100 * sum(S+D+I) / sum(reference words) from per_utt.tsv, per duration bin [low, high);",
    "wall-clock": "first step line to the last analysed 'Nepoch results' line of train.log.",
}


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="See the module docstring (benchmarks/loss_stability.py) for the definitions.")
    p.add_argument("--arm", action="append", required=True, metavar="NAME[@SEED]=EXPDIR[:TOKENS_FROM]",
                   help="an ESPnet exp dir trained with log_interval: 1 (repeatable; the same NAME again = another "
                        "seed; TOKENS_FROM: the arm, OTHER or OTHER@SEED, whose per-step batch_tokens/batch_size to use, or "
                        "'plan': from the run's own batches, rebuilt from its config.yaml)")
    p.add_argument("--out_dir", type=Path, required=True)
    p.add_argument("--warmup_steps", type=int, default=None,
                   help="override every arm's scheduler_conf.warmup_steps (steps <= it are warm-up)")
    p.add_argument("--utt2dur", type=Path, default=None, help="the test set's utt2dur, for the WER by duration")
    p.add_argument("--duration_edges", type=float, nargs="+", default=[10.0, 60.0],
                   help="duration bin edges in seconds (bins [0, e1), [e1, e2), ..., [eK, inf))")
    p.add_argument("--decode_glob", default="decode_*/test/score/per_utt.tsv",
                   help="per_utt.tsv under each exp dir (the first match in sorted order is used)")
    p.add_argument("--title", default="loss stability")
    return p


def report(args) -> Tuple[dict, Dict[Tuple[str, str], dict]]:
    if sorted(args.duration_edges) != list(args.duration_edges) or min(args.duration_edges) <= 0:
        raise ReportError(f"--duration_edges must be positive and increasing, got {args.duration_edges}")
    runs = parse_arms(args.arm)
    logs = {r.label: read_train_log(r.exp_dir) for r in runs}
    notes: Dict[str, List[str]] = {r.label: [] for r in runs}
    for r in runs:  # first: a run planned again may lend its counts
        if r.tokens_from == PLAN:
            notes[r.label] += planned_counts(r, logs[r.label])
    for r in runs:
        if r.tokens_from is not None and r.tokens_from != PLAN:
            lender = lender_of(r, runs)
            if lender.tokens_from is not None and lender.tokens_from != PLAN:
                raise ReportError(f"arm {r.label}: its TOKENS_FROM {lender.label} borrows counts itself; "
                                  "name the token_normalized arm directly")
            notes[r.label] += borrowed_counts(r, logs[r.label], lender, logs[lender.label])
            notes[r.label].append(f"token counts from {lender.label}")
    utt2dur = read_utt2dur(args.utt2dur) if args.utt2dur is not None else None
    results = {
        "warmup_rule": ("steps after warm-up = optimizer step > warmup_steps (" +
                        (f"--warmup_steps {args.warmup_steps}" if args.warmup_steps is not None
                         else "each arm's scheduler_conf.warmup_steps") +
                        "; optimizer step = ceil(iteration / accum_grad), iterations counted over the run)"),
        "definitions": DEFINITIONS, "duration_edges": list(args.duration_edges),
        "duration_bins": bin_labels(args.duration_edges), "arms": {},
    }
    series = {}
    for r in runs:
        out = analyse(r, logs[r.label], args, utt2dur, notes[r.label])
        series[(r.name, r.seed)] = out.pop("series")
        results["arms"].setdefault(r.name, {"runs": {}})["runs"][r.seed] = out
    for entry in results["arms"].values():
        entry["mean"] = seed_mean(entry["runs"], args.duration_edges)
    return results, series


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    try:
        results, series = report(args)
    except ReportError as exc:
        raise SystemExit(f"loss_stability.py: error: {exc}") from None
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "loss_stability.json").write_text(json.dumps(_clean(results), indent=2) + "\n", encoding="utf-8")
    table = markdown(results)
    (args.out_dir / "loss_stability.md").write_text(table + "\n", encoding="utf-8")
    plot(results, series, args.out_dir / "loss_stability.png", args.title)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
