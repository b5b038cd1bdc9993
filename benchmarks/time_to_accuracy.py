#!/usr/bin/env python3
"""Time to accuracy: train arms side by side through the recipe, report when each reaches a target.

Every arm is an ESPnet training config (plus optional extra ``--asr_args``) trained by the
recipe's own stage 11 (``egs2/fsdd_digits/asr1/run.sh``) on data the recipe's stages 1–10
prepared; arms and seeds run side by side (``--parallel``, ``--threads`` each), so their
wall-clock figures are measured under the same machine load.  Then, per arm and seed:

* per epoch: wall-clock since the training started (``train.log`` time stamps, validation
  included), steps, encoder input frames (the audit CLI's ``total_frames`` of every epoch, for the
  arm's ``batch_type``/``batch_bins``/frame-rate settings, padding included), and the valid
  figures of that epoch's checkpoint computed the same way for every model
  (``benchmarks/valid_metrics.py``: token-weighted attention accuracy, CTC greedy token error
  rate) — ESPnet's logged valid figures are weighted by the model's batch weight and are not
  comparable across ``model: espnet`` and ``model: token_normalized``;
* the wall-clock and steps at which the arm first reaches the target: by default the mean of the
  reference arm's last two valid CTC error rates in the same seed, so that one noisy epoch does not
  decide it (``--target_arm``, ``--metric``, ``--target_rule``; :func:`target_value`), and also
  where it first reaches the reference arm's single best epoch;
* the test WER of its ``valid.acc.ave.pth`` decoded with the recipe's inference config
  (stages 12–13), for every test set the recipe scores (``--decode_recipe_args "--test_tempo
  0.8,1.25"`` adds the tempo-changed sets), with the mean paired difference to the reference arm;
* the peak resident memory of its training and of its decoding: the largest process of each
  stage's process tree (``os.wait4``'s ``ru_maxrss``; ``<tag>.memory.json`` in ``--out_dir``).

Each arm trains as ``run.sh`` trains its config (its ``max_epoch``, full passes, ESPnet's average of
the ``keep_nbest_models`` best epochs, which the report lists per seed): an option that would train
or choose checkpoints otherwise (:func:`training_protocol`; short epochs by
``--num_iters_per_epoch``, say) is refused unless ``--nonstandard_protocol`` is given, and the
report's first lines state each arm's protocol.

Usage (CPU, the recipe's data in ``--datadir``/``--dumpdir``/``--expdir``, stats from stage 10)::

    python benchmarks/time_to_accuracy.py --recipe_dir egs2/fsdd_digits/asr1 \\
        --datadir data --dumpdir dump --expdir exp --out_dir tta \\
        --arm numel=conf/train_asr_conformer_numel_cpu.yaml \\
        --arm dynres=conf/train_asr_conformer_dynres_cpu.yaml \\
        --seeds 0 1 --parallel 2 --threads 1

``--ngpu 1 --parallel 1`` runs the same on a GPU (``benchmarks/run_gpu_benchmark.sh --mode
time_to_accuracy``).  An arm whose experiment directory already holds every epoch's results is
not trained again (``--retrain`` forces it), and a checkpoint's valid figures are kept next to it
(``<N>epoch.valid_metrics.json``) and reused while the checkpoint, the valid directory and
``benchmarks/valid_metrics.py`` are unchanged.  Outputs in ``--out_dir``: ``time_to_accuracy.json``,
``time_to_accuracy.md`` and ``time_to_accuracy.png`` (valid CTC error rate, attention accuracy and
attention loss per target against wall-clock).  With several seeds the report adds the mean over
seeds per arm and epoch and the mean paired difference to the target arm with its 95 % interval
(:func:`paired_difference`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import yaml


HERE = Path(__file__).resolve().parent
METRICS = {"ter_ctc_token": "min", "acc_token": "max", "att_loss_target": "min"}
# seed_means' count of seeds in which an arm is not behind the target arm, per metric
NOT_BEHIND = {"ter_ctc_token": "seeds_ctc_not_behind", "acc_token": "seeds_acc_not_behind",
              "att_loss_target": "seeds_att_loss_not_behind"}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# Training options that decide the batches' order, the checkpoints or the averaged model: the config sets them for
# run.sh; given in --asr_args with another value, the study trains otherwise (training_protocol).
PROTOCOL_KEYS = ("num_iters_per_epoch", "keep_nbest_models", "best_model_criterion", "nbest_averaging_interval",
                 "patience", "early_stopping_criterion")


def training_protocol(config: Path, max_epoch: Optional[int], asr_args: str, decode: bool = True) -> dict:
    """How an arm trains, against how ``run.sh`` trains its config.

    Returns the config's ``max_epoch``, ``keep_nbest_models`` and :data:`PROTOCOL_KEYS` with
    ``--max_epoch`` and ``--asr_args`` applied, and two lists of strings:

    * ``deviations``: what makes the run not ``run.sh``'s: a :data:`PROTOCOL_KEYS` option given
      another value than the config's (``--num_iters_per_epoch`` orders the batches otherwise:
      ESPnet seeds pass ``k``'s shuffle with ``seed + k`` counting from 0 instead of 1), or
      another ``max_epoch`` while the averaged model is decoded;
    * ``notes``: another ``max_epoch`` with ``decode=False``: each epoch is ``run.sh``'s epoch
      of the same number, only fewer or more of them.

    Raises:
        SystemExit: neither the config nor ``max_epoch`` sets the number of epochs.
    """
    conf = yaml.safe_load(Path(config).read_text()) or {}
    protocol = {k: conf[k] for k in ("max_epoch", "keep_nbest_models", *PROTOCOL_KEYS) if k in conf}
    deviations, notes = [], []
    if max_epoch is not None and max_epoch != conf.get("max_epoch"):
        text = f"max_epoch {max_epoch} (config: {conf.get('max_epoch')})"
        if decode:
            deviations.append(text)
        else:
            notes.append(f"{text}: run.sh's first epochs")
        protocol["max_epoch"] = max_epoch
    if protocol.get("max_epoch") is None:
        raise SystemExit(f"{config} sets no max_epoch: set it there or pass --max_epoch")
    extra = shlex.split(asr_args)
    for i, token in enumerate(extra[:-1]):
        if token.startswith("--") and token[2:] in PROTOCOL_KEYS:
            value = yaml.safe_load(extra[i + 1])
            if value != conf.get(token[2:]):
                deviations.append(f"{token[2:]} {extra[i + 1]} (config: {conf.get(token[2:])})")
            protocol[token[2:]] = value
    return {**protocol, "deviations": deviations, "notes": notes}


def averaged_epochs(exp_dir: Path, keep_nbest: Optional[int]) -> Optional[List[int]]:
    """The epochs averaged into ``valid.acc.ave.pth`` of a finished run, from the checkpoints ESPnet kept.

    ESPnet keeps the ``keep_nbest_models`` best epochs and the last one, and averages the best
    ones (one criterion): ``keep_nbest`` files, or ``keep_nbest + 1`` with the last not among the
    averaged.  ``None`` when that cannot be told (fewer epochs than ``keep_nbest``, where ESPnet
    takes the single best, other files).
    """
    names = (re.fullmatch(r"(\d+)epoch\.pth", f.name) for f in exp_dir.glob("*epoch.pth"))
    kept = sorted(int(m.group(1)) for m in names if m)
    last = finished_epochs(exp_dir)
    if kept == [1] and last == 1:  # one epoch: that checkpoint is the model
        return [1]
    if not keep_nbest or not kept or kept[-1] != last or last < keep_nbest:
        return None
    if len(kept) == keep_nbest:
        return kept
    return kept[:-1] if len(kept) == keep_nbest + 1 else None


def arm_tag(args, arm: str, seed: int) -> str:
    """Experiment tag of an arm and seed: ``<expdir>/asr_<tag_prefix><arm>_s<seed>``."""
    return f"{args.tag_prefix}{arm}_s{seed}"


def finished_epochs(exp_dir: Path) -> int:
    log = exp_dir / "train.log"
    if not log.exists():
        return 0
    return sum("epoch results:" in line for line in log.read_text(errors="replace").splitlines())


def copy_stable_checkpoints(exp_dir: Path, seen: Dict[str, tuple], final: bool) -> None:
    """One poll of :func:`copy_epoch_checkpoints`: copy each ``<N>epoch.pth`` of ``exp_dir`` that is
    complete to ``exp_dir/epochs/``.

    A checkpoint counts as complete once its size and modification time are the same as at the
    previous poll (``seen``: name -> ``(size, mtime_ns)``, updated here), or on the ``final`` poll
    (training has ended); it is copied again whenever the source differs from the copy
    (``shutil.copy2`` keeps the modification time, so a finished copy matches).
    """
    out = exp_dir / "epochs"
    out.mkdir(parents=True, exist_ok=True)
    for f in exp_dir.glob("*epoch.pth"):
        try:
            st = f.stat()
        except FileNotFoundError:  # pruned between glob and stat
            continue
        sig = (st.st_size, st.st_mtime_ns)
        stable = final or seen.get(f.name) == sig
        seen[f.name] = sig
        dst = out / f.name
        if dst.exists():
            d = dst.stat()
            if (d.st_size, d.st_mtime_ns) == sig:
                continue
        if stable:
            try:
                shutil.copy2(f, dst)
            except FileNotFoundError:  # pruned between stat and copy: nothing to keep
                pass


def copy_epoch_checkpoints(exp_dir: Path, stop: threading.Event, poll_sec: float = 2.0) -> None:
    """Copy each ``<N>epoch.pth`` to ``exp_dir/epochs/`` before ESPnet's ``keep_nbest_models`` prunes it.

    ESPnet writes a checkpoint in place (``torch.save``), so a file seen mid-write is not copied:
    :func:`copy_stable_checkpoints` every ``poll_sec`` until ``stop`` is set, then a final poll.
    """
    seen: Dict[str, tuple] = {}
    while True:
        final = stop.is_set()
        copy_stable_checkpoints(exp_dir, seen, final)
        if final:
            return
        stop.wait(poll_sec)


# Runs argv[2:] and writes the peak RSS (KiB) of its process tree to argv[1]: RUSAGE_CHILDREN of this
# small process, so neither the benchmark's own memory (inherited by a child until it execs) nor
# this wrapper's counts.
_MEASURE = ("import resource, subprocess, sys\n"
            "code = subprocess.call(sys.argv[2:])\n"
            "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
            "sys.exit(code)\n")


def process_tree(root: int) -> List[int]:
    """``root`` and every process descended from it (Linux ``/proc``), parents before children."""
    parents: Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # ended while listed
                continue
    tree, i = [root], 0
    while i < len(tree):
        tree += [pid for pid, ppid in parents.items() if ppid == tree[i]]
        i += 1
    return tree


class CpuRotation:
    """Rotates the trainings that run side by side over the CPUs, so that a CPU slower than the others
    (a virtual CPU whose host core is busier, say) slows every arm alike.

    Every ``period_sec``, training ``i`` of the ``m`` registered (in the order they started) is pinned
    to CPU ``cpus[(i + k) % len(cpus)]`` at rotation ``k``, with every thread of every process of its
    tree (data-loader workers started later inherit it); with ``m == len(cpus)`` each training spends
    the same share of the time on each CPU.  A training's wall-clock then measures its own work under
    the pair's mean CPU speed.  Linux only (``/proc``, ``os.sched_setaffinity``).
    """

    def __init__(self, period_sec: float, cpus: Optional[List[int]] = None):
        self.period_sec = period_sec
        self.cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
        self.roots: List[int] = []
        self.step = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def register(self, pid: int) -> None:
        with self._lock:
            self.roots.append(pid)

    def unregister(self, pid: int) -> None:
        with self._lock:
            if pid in self.roots:
                self.roots.remove(pid)
            if not self.roots:  # what runs next (decoding) runs anywhere
                return
        self.rotate(advance=False)

    def assignment(self) -> Dict[int, int]:
        """``{root pid: CPU}`` at the current rotation."""
        with self._lock:
            return {root: self.cpus[(i + self.step) % len(self.cpus)] for i, root in enumerate(self.roots)}

    def rotate(self, advance: bool = True) -> Dict[int, int]:
        """Pin every registered tree to its CPU of this rotation, then advance; returns the assignment."""
        placed = self.assignment()
        for root, cpu in placed.items():
            for pid in process_tree(root):
                try:
                    for tid in os.listdir(f"/proc/{pid}/task"):
                        os.sched_setaffinity(int(tid), {cpu})
                except (OSError, ValueError):  # ended meanwhile
                    continue
        if advance:
            self.step += 1
        return placed

    def start(self) -> "CpuRotation":
        def loop():
            while not self._stop.wait(self.period_sec):
                self.rotate()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def run_measured(cmd: List[str], cwd: Path, env: dict, log: Path,
                 rotation: Optional[CpuRotation] = None) -> Tuple[int, int]:
    """Run ``cmd`` to its end with stdout and stderr in ``log``; returns its exit code and the peak
    resident memory in KiB of the largest process of its tree (``ru_maxrss`` of the children of a
    small wrapper process, as Linux reports it: every descendant that was waited for; not a sum).
    With ``rotation``, the process tree takes part in it while it runs (:class:`CpuRotation`)."""
    peak = log.with_name(log.name + ".peak_rss_kib")
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-c", _MEASURE, str(peak), *cmd], cwd=cwd, env=env, stdout=fh,
                                stderr=subprocess.STDOUT)
        if rotation is not None:
            rotation.register(proc.pid)
        try:
            code = proc.wait()
        finally:
            if rotation is not None:
                rotation.unregister(proc.pid)
    peak_kib = int(peak.read_text()) if peak.exists() else 0
    peak.unlink(missing_ok=True)
    return code, peak_kib


def run_recipe(args, tag: str, stages: str, extra: List[str], log: Path, rotation: Optional[CpuRotation] = None) -> int:
    """``run.sh --stage a --stop_stage b`` of the recipe for one experiment tag; returns the peak
    resident memory (KiB) of its largest process (:func:`run_measured`); raises on failure."""
    a, b = stages.split("-")
    cmd = ["bash", "run.sh", "--stage", a, "--stop_stage", b, "--ngpu", str(args.ngpu), "--num_train",
           str(args.num_train), "--datadir", str(args.datadir), "--dumpdir", str(args.dumpdir), "--expdir",
           str(args.expdir), "--asr_tag", tag, "--python", sys.executable] + shlex.split(
               getattr(args, "recipe_args", "") or "") + extra
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    code, peak_kib = run_measured(cmd, args.recipe_dir, env, log, rotation)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {code}); see {log}")
    return peak_kib


def memory_file(args, tag: str) -> Path:
    """``<out_dir>/<tag>.memory.json``: peak resident memory (GiB) of the arm's training and decoding."""
    return args.out_dir / f"{tag}.memory.json"


def record_memory(args, tag: str, what: str, peak_kib: int) -> None:
    path = memory_file(args, tag)
    entry = json.loads(path.read_text()) if path.exists() else {}
    entry[f"{what}_peak_rss_gib"] = peak_kib / 2**20
    path.write_text(json.dumps(entry) + "\n")


def train_arm(args, arm: str, config: Path, seed: int) -> None:
    tag = arm_tag(args, arm, seed)
    exp_dir = args.expdir / f"asr_{tag}"
    max_epoch = args.protocols[arm]["max_epoch"]
    if not args.retrain and finished_epochs(exp_dir) >= max_epoch:
        print(f"[{tag}] {finished_epochs(exp_dir)} epochs already in {exp_dir}: not trained again", flush=True)
        return
    if exp_dir.exists():
        shutil.rmtree(exp_dir)
    exp_dir.mkdir(parents=True)
    stop = threading.Event()
    copier = threading.Thread(target=copy_epoch_checkpoints, args=(exp_dir, stop), daemon=True)
    copier.start()
    asr_args = f"--seed {seed} --max_epoch {max_epoch} {args.asr_args}".strip()
    print(f"[{tag}] training {config} ({asr_args})", flush=True)
    memory_file(args, tag).unlink(missing_ok=True)
    try:
        peak = run_recipe(args, tag, "11-11", ["--asr_config", str(config.resolve()), "--asr_args", asr_args],
                          args.out_dir / f"{tag}.train.out", getattr(args, "rotation", None))
        record_memory(args, tag, "train", peak)
    finally:
        stop.set()
        copier.join()


def decode_arm(args, arm: str, seed: int) -> Optional[dict]:
    """Stages 12–13 with ``--inference_config``; the test WER line of ESPnet's score."""
    tag = arm_tag(args, arm, seed)
    peak = run_recipe(args, tag, "12-13", ["--inference_config", str(args.inference_config.resolve()),
                                           *shlex.split(args.decode_recipe_args)],
                      args.out_dir / f"{tag}.decode.out")
    record_memory(args, tag, "decode", peak)
    return parse_wer(score_dir(args, tag))


def score_dir(args, tag: str, test_set: str = "test", model: str = "valid.acc.ave") -> Path:
    """The recipe's score directory of ``tag``'s checkpoint ``<model>.pth`` on ``test_set``."""
    return args.expdir / f"asr_{tag}" / f"decode_{args.inference_config.stem}_{model}" / test_set / "score"


def parse_test_sets(args, tag: str, model: str = "valid.acc.ave") -> Dict[str, dict]:
    """WER of every test set the recipe scored for ``tag`` (``test``, ``test_tempo0.8``, …): ``{set: parse_wer}``."""
    decode_dir = score_dir(args, tag, model=model).parent.parent
    sets = sorted(p.parent.parent.name for p in decode_dir.glob("*/score/result.json")) if decode_dir.is_dir() else []
    return {name: parse_wer(score_dir(args, tag, name, model)) for name in sets}


AT_WALLCLOCK_MODEL = "at_wallclock"  # <exp>/at_wallclock.pth: the epoch checkpoint nearest another arm's training time


def parse_at_wallclock(spec: Optional[str]) -> Optional[Tuple[Path, str]]:
    """``--at_wallclock_of REPORT.json:ARM`` as ``(report, arm)``; ``None`` when not given.

    Raises:
        SystemExit: not ``path:arm`` or no such report.
    """
    if not spec:
        return None
    path, sep, arm = spec.rpartition(":")
    if not sep or not arm or not Path(path).is_file():
        raise SystemExit(f"--at_wallclock_of takes REPORT.json:ARM (an earlier time_to_accuracy.json), got {spec!r}")
    return Path(path), arm


def nearest_epoch(rows: List[dict], wall_sec: float) -> dict:
    """The epoch row whose ``wall_sec`` (training wall-clock at its end) is closest to ``wall_sec``
    (the earlier one on a tie)."""
    return min(rows, key=lambda r: (abs(r["wall_sec"] - wall_sec), r["wall_sec"]))


def at_wallclock_entry(args, arm: str, seed: int, entry: dict, reference: Tuple[Path, str]) -> dict:
    """``arm`` at the reference arm's training wall-clock: the epoch checkpoint whose end is nearest the
    reference's last epoch's ``wall_sec`` in the same seed (:func:`nearest_epoch`), copied to
    ``<exp>/at_wallclock.pth``, decoded on every test set by the recipe's stages 12–13, and reported as
    arm ``<arm>@<ref>`` with its epochs up to that checkpoint.

    Raises:
        SystemExit: the reference report lacks the arm or the seed.
    """
    report_path, ref_arm = reference
    ref = json.loads(report_path.read_text())["arms"]
    try:
        ref_wall = ref[ref_arm][str(seed)]["epochs"][-1]["wall_sec"]
    except KeyError:
        raise SystemExit(f"--at_wallclock_of: {report_path} has no arm {ref_arm!r} with seed {seed}") from None
    row = nearest_epoch(entry["epochs"], ref_wall)
    tag = arm_tag(args, arm, seed)
    exp_dir = args.expdir / f"asr_{tag}"
    shutil.copy2(exp_dir / "epochs" / f"{row['epoch']}epoch.pth", exp_dir / f"{AT_WALLCLOCK_MODEL}.pth")
    if not args.skip_decode:
        run_recipe(args, tag, "12-13", ["--inference_config", str(args.inference_config.resolve()),
                                        "--inference_asr_model", f"{AT_WALLCLOCK_MODEL}.pth",
                                        *shlex.split(args.decode_recipe_args)],
                   args.out_dir / f"{tag}.decode_at_wallclock.out")
    return {"epochs": [r for r in entry["epochs"] if r["epoch"] <= row["epoch"]],
            "test": parse_wer(score_dir(args, tag, model=AT_WALLCLOCK_MODEL)),
            "test_sets": parse_test_sets(args, tag, AT_WALLCLOCK_MODEL),
            "batches_per_epoch": entry.get("batches_per_epoch"), "evaluation_of": tag,
            "protocol": entry.get("protocol"),
            "checkpoint_epoch": row["epoch"], "checkpoint_wall_sec": row["wall_sec"],
            "reference_wall_sec": ref_wall, "reference_arm": ref_arm,
            "train_peak_rss_gib": entry.get("train_peak_rss_gib"), "decode_peak_rss_gib": None}


def parse_wer(score_dir: Path) -> Optional[dict]:
    """Test WER and its S/D/I (``wer``, ``S``, ``D``, ``I``, ``N`` words), and CER and its S/D/I
    (``cer``, ``cer_S``, ``cer_D``, ``cer_I``, ``cer_N`` characters) where the score has them, from the
    recipe's ``score/result.json`` (stage 13); None if absent."""
    result = score_dir / "result.json"
    if not result.exists():
        return None
    r = json.loads(result.read_text())
    out = {"wer": r["wer"], "S": r["wer_sub"], "D": r["wer_del"], "I": r["wer_ins"], "N": r["wer_ref_words"]}
    if "cer" in r:
        out.update(cer=r["cer"], cer_S=r["cer_sub"], cer_D=r["cer_del"], cer_I=r["cer_ins"], cer_N=r["cer_ref_chars"])
    return out


def encoder_frames_per_epoch(args, config: Path, epoch: int = 1, seed: Optional[int] = None) -> Dict[str, float]:
    """The audit CLI's figures for ``epoch`` (``--config``: the arm's own sampler and frame-rate
    settings, ``--epoch``/``--seed``: that epoch's plan) on the training shape files;
    ``--batch_type`` / ``--batch_bins`` in ``--asr_args`` override, as in training."""
    from espnet_dynres.core.frame_rate_policy import parse_fs

    stats = args.expdir / args.stats_dir / "train"
    cmd = [sys.executable, "-m", "espnet_dynres.bin.audit_batches", "--config", str(config), "--fs", str(parse_fs(args.fs)),
           "--speech_shape", str(stats / "speech_shape"), "--text_shape", str(stats / f"text_shape.{args.token_type}"),
           "--epoch", str(epoch), "--json", "-"] + ([] if seed is None else ["--seed", str(seed)])
    extra = shlex.split(args.asr_args)
    for key in ("--batch_type", "--batch_bins"):
        if key in extra[:-1]:
            cmd += [key, extra[extra.index(key) + 1]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    summary = json.loads(out[out.index("{"):])
    return {"batches": summary["num_batches"], "frames": summary["total_frames"] + summary.get("padded_frames", 0)}


def sub_epoch_frames(audits: List[Dict[str, float]], iters: int, num_epochs: int) -> List[float]:
    """Encoder frames of each of ``num_epochs`` "epochs" of ``iters`` steps (ESPnet's
    ``--num_iters_per_epoch``), which run through the passes over the data one after the other:
    ``audits`` per pass (``batches``, ``frames``; the last one repeats if more are needed), each
    step of a pass counted at that pass's mean frames per batch."""
    out, pass_i, used = [], 0, 0  # used: steps of pass pass_i already taken
    for _ in range(num_epochs):
        need, frames = iters, 0.0
        while need > 0:
            a = audits[min(pass_i, len(audits) - 1)]
            take = min(need, int(a["batches"]) - used)
            frames += take * a["frames"] / a["batches"]
            need -= take
            used += take
            if used == a["batches"]:
                pass_i, used = pass_i + 1, 0
        out.append(frames)
    return out


def eval_device(args) -> str:
    """Where checkpoints are evaluated: ``"cuda"`` when the arms train on GPUs (``--ngpu`` > 0), else ``"cpu"``."""
    return "cuda" if getattr(args, "ngpu", 0) > 0 else "cpu"


def evaluate_cached(vm, ckpt: Path, valid_dir: Path, config: Path, restat_train_dir: Optional[Path] = None,
                    name: str = "", device: str = "cpu") -> dict:
    """``valid_metrics.evaluate`` of one checkpoint, stored in ``<ckpt stem>.valid_metrics[.<name>].json``
    and reused only while the checkpoint (size, mtime), the valid directory, the config, the
    re-estimate's training directory and the source of ``valid_metrics.py`` are the ones it was
    computed from.  With ``restat_train_dir``, the checkpoint's BatchNorm statistics are first
    re-estimated as the run does before each validation (``model_conf.batchnorm_restat_batches``).
    ``device``: where the checkpoint is evaluated (``"cuda"`` under ``--ngpu`` > 0)."""
    stat = ckpt.stat()
    stamp = {"checkpoint_bytes": stat.st_size, "checkpoint_mtime_ns": stat.st_mtime_ns,
             "valid_dir": str(Path(valid_dir).resolve()),
             "valid_metrics_sha1": hashlib.sha1(Path(vm.__file__).read_bytes()).hexdigest()}
    restat_batches = 0
    if restat_train_dir is not None:
        restat_batches = int(((yaml.safe_load(Path(config).read_text()) or {}).get("model_conf") or {})
                             .get("batchnorm_restat_batches", 6))
        stamp.update(config_sha1=hashlib.sha1(Path(config).read_bytes()).hexdigest(),
                     restat_train_dir=str(Path(restat_train_dir).resolve()), restat_batches=restat_batches)
    cache = ckpt.with_name(ckpt.stem + (f".valid_metrics.{name}.json" if name else ".valid_metrics.json"))
    if cache.exists():
        try:
            stored = json.loads(cache.read_text(encoding="utf-8"))
        except ValueError:
            stored = {}
        if stored.get("stamp") == stamp:
            return stored["metrics"]
    metrics = vm.evaluate(ckpt, valid_dir, config, restat_train_dir, restat_batches, device)
    cache.write_text(json.dumps({"stamp": stamp, "metrics": metrics}, indent=1) + "\n", encoding="utf-8")
    return metrics


def not_behind(value: float, reference: float, mode: str) -> bool:
    """``value`` at least as good as ``reference`` (``mode`` "min": lower is better, "max": higher)."""
    return value <= reference if mode == "min" else value >= reference


def first_reaching(values: List[float], target: float, mode: str) -> Optional[int]:
    """Index of the first value at or beyond ``target`` (``mode`` "min": <=, "max": >=), else None."""
    for i, v in enumerate(values):
        if v == v and not_behind(v, target, mode):
            return i
    return None


def report(args, arms: Dict[str, Path]) -> dict:
    tc = _load("training_curves")
    vm = _load("valid_metrics")
    mode = METRICS[args.metric]
    results: dict = {"metric": args.metric, "target_arm": args.target_arm, "target_rule": args.target_rule,
                     "arms": {}}
    for arm, config in arms.items():
        extra = shlex.split(args.asr_args)
        batch_type = (extra[extra.index("--batch_type") + 1] if "--batch_type" in extra[:-1]
                      else (yaml.safe_load(Path(config).read_text()) or {}).get("batch_type"))
        protocol = args.protocols[arm]
        iters, max_epoch = protocol.get("num_iters_per_epoch"), protocol["max_epoch"]
        for seed in args.seeds:
            # ESPnet's samplers give the same batches every epoch: one audit. The dynres plan is redrawn
            # from (seed, epoch) and, under curriculum_epochs, cheaper in the first epochs: audit each.
            # Under --num_iters_per_epoch an "epoch" is that many steps of the passes over the data.
            if batch_type == "dynres":
                audits, total = [], 0
                while len(audits) < max_epoch or (iters and total < iters * max_epoch):
                    audits.append(encoder_frames_per_epoch(args, config, len(audits) + 1, seed))
                    total += audits[-1]["batches"]
            else:
                audits = [encoder_frames_per_epoch(args, config, seed=seed)] * max_epoch
            per_epoch = ([a["frames"] for a in audits] if iters is None
                         else sub_epoch_frames(audits, iters, max_epoch))
            tag = arm_tag(args, arm, seed)
            exp_dir = args.expdir / f"asr_{tag}"
            run = tc.read_run(tag, exp_dir)
            rows = []
            for i, epoch in enumerate(run.epochs):
                ckpt = exp_dir / "epochs" / f"{epoch}epoch.pth"
                valid = (evaluate_cached(vm, ckpt, args.valid_dir, exp_dir / "config.yaml", device=eval_device(args))
                         if ckpt.exists() else {})
                rows.append({"epoch": epoch, "wall_sec": run.wall_seconds[i], "train_sec": run.cumulative_seconds[i],
                             "steps": run.steps[i], "encoder_input_frames": sum(per_epoch[:epoch]), **valid})
                print(f"[{tag}] epoch {epoch}: {rows[-1]}", flush=True)
            memory = json.loads(memory_file(args, tag).read_text()) if memory_file(args, tag).exists() else {}
            results["arms"].setdefault(arm, {})[seed] = {"epochs": rows, "test": parse_wer(score_dir(args, tag)),
                                                         "test_sets": parse_test_sets(args, tag),
                                                         "batches_per_epoch": audits[0]["batches"],
                                                         "protocol": protocol, "averaged_epochs": averaged_epochs(
                                                             exp_dir, protocol.get("keep_nbest_models")),
                                                         "train_peak_rss_gib": memory.get("train_peak_rss_gib"),
                                                         "decode_peak_rss_gib": memory.get("decode_peak_rss_gib")}
    for name, (base, rate_hz) in parse_eval_rate_variants(getattr(args, "eval_rate_variant", []), arms).items():
        for seed in args.seeds:
            results["arms"].setdefault(name, {})[seed] = eval_rate_variant_entry(
                args, vm, name, results["arms"][base][seed], arm_tag(args, base, seed), seed)
    return add_targets(results, list(results["arms"]), args.seeds)


def parse_eval_rate_variants(specs: List[str], arms: Dict[str, Path]) -> Dict[str, Tuple[str, float]]:
    """``{name: (trained arm, evaluation rate Hz)}`` from ``NAME=ARM:RATE`` specs.

    Raises:
        SystemExit: a malformed spec, or an arm that is not trained here (named).
    """
    out = {}
    for spec in specs:
        name, _, rest = spec.partition("=")
        base, _, rate = rest.partition(":")
        try:
            rate_hz = float(rate)
        except ValueError:
            rate_hz = float("nan")
        if not name or base not in arms or not rate_hz > 0:
            raise SystemExit(f"--eval_rate_variant takes NAME=ARM:RATE_HZ with ARM one of {list(arms)}, got {spec!r}")
        out[name] = (base, rate_hz)
    return out


def prepare_eval_rate_variant(args, name: str, base: str, rate_hz: float, seed: int) -> None:
    """``<expdir>/asr_<tag of name>``: the trained arm's ``valid.acc.ave.pth`` with its BatchNorm statistics
    re-estimated at ``rate_hz`` and ``eval_frame_rate_hz: rate_hz`` in its config
    (``espnet_dynres.bin.reestimate_batchnorm``), decoded by the recipe's stages 12–13 unless
    ``--skip_decode``."""
    base_dir = args.expdir / f"asr_{arm_tag(args, base, seed)}"
    tag = arm_tag(args, name, seed)
    cmd = [sys.executable, "-m", "espnet_dynres.bin.reestimate_batchnorm", "--exp_dir", str(base_dir),
           "--train_dir", str(args.dumpdir / "raw" / "train"), "--out_dir", str(args.expdir / f"asr_{tag}"),
           "--eval_frame_rate_hz", str(rate_hz)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    code, _ = run_measured(cmd, args.recipe_dir, env, args.out_dir / f"{tag}.reestimate.out")
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {code}); see {args.out_dir / f'{tag}.reestimate.out'}")
    if not args.skip_decode:
        decode_arm(args, name, seed)


def eval_rate_variant_entry(args, vm, name: str, base_entry: dict, base_tag: str, seed: int) -> dict:
    """The report entry of an evaluation-rate variant: the trained arm's epochs (wall-clock, steps, frames:
    the same training), each epoch's checkpoint validated with the variant's config after a BatchNorm
    re-estimate at its rate (as the run would before a validation at that rate), and the variant's own
    test scores (:func:`prepare_eval_rate_variant`)."""
    tag = arm_tag(args, name, seed)
    config = args.expdir / f"asr_{tag}" / "config.yaml"
    epochs_dir = args.expdir / f"asr_{base_tag}" / "epochs"
    rows = []
    for row in base_entry["epochs"]:
        ckpt = epochs_dir / f"{row['epoch']}epoch.pth"
        keep = {k: row[k] for k in ("epoch", "wall_sec", "train_sec", "steps", "encoder_input_frames") if k in row}
        valid = (evaluate_cached(vm, ckpt, args.valid_dir, config, args.dumpdir / "raw" / "train", name,
                                 eval_device(args)) if ckpt.exists() else {})
        rows.append({**keep, **valid})
        print(f"[{tag}] epoch {row['epoch']}: {rows[-1]}", flush=True)
    return {"epochs": rows, "test": parse_wer(score_dir(args, tag)), "test_sets": parse_test_sets(args, tag),
            "batches_per_epoch": base_entry.get("batches_per_epoch"), "evaluation_of": base_tag,
            "protocol": base_entry.get("protocol"),
            "train_peak_rss_gib": base_entry.get("train_peak_rss_gib"), "decode_peak_rss_gib": None}


TARGET_RULES = ("last_two_mean", "best")


def target_value(values: List[float], mode: str, rule: str) -> float:
    """The target a reference curve sets (``values`` per epoch, NaN where unknown).

    * ``best``: its single best epoch (``min`` or ``max`` by ``mode``): one noisy epoch can set it;
    * ``last_two_mean``: the mean of its last two known epochs, which the curve itself always reaches
      (the better of the two is at or beyond it), and which one lucky epoch moves only by half.

    Raises:
        ValueError: no known value, or an unknown ``rule``.
    """
    known = [v for v in values if v == v]
    if not known:
        raise ValueError("no known value")
    if rule == "best":
        return min(known) if mode == "min" else max(known)
    if rule == "last_two_mean":
        return sum(known[-2:]) / len(known[-2:])
    raise ValueError(f"unknown target rule {rule!r}; one of {TARGET_RULES}")


def add_targets(results: dict, arms: List[str], seeds: List[int]) -> dict:
    """Per seed: the target arm's target (``results["target_rule"]``, default ``best``; see
    :func:`target_value`), and where every arm first reaches it; the same for the target arm's
    single best epoch whatever the rule.

    Adds ``target`` and ``reached`` (``None``, or the epoch, wall-clock seconds, steps and the
    ratio of its wall-clock to the target arm's own first time at that figure), and
    ``best_target`` and ``reached_best`` likewise, to each ``results["arms"][arm][seed]``; an arm
    without a run of a seed is left out of that seed.
    """
    metric, mode = results["metric"], METRICS[results["metric"]]
    rule = results.setdefault("target_rule", "best")
    for seed in seeds:
        ref = results["arms"][results["target_arm"]][seed]["epochs"]
        values = [r.get(metric, float("nan")) for r in ref]
        try:
            targets = {"": target_value(values, mode, rule), "_best": target_value(values, mode, "best")}
        except ValueError as e:
            raise ValueError(f"arm {results['target_arm']!r} seed {seed}: no valid {metric} "
                             f"(no epoch checkpoints?) or bad rule: {e}") from None
        for suffix, target in targets.items():
            ref_row = ref[first_reaching(values, target, mode)]
            for arm in arms:
                entry = results["arms"][arm].get(seed)
                if entry is None:  # a merge of a study in progress: this arm's run of the seed is to come
                    continue
                rows = entry["epochs"]
                i = first_reaching([r.get(metric, float("nan")) for r in rows], target, mode)
                entry["best_target" if suffix else "target"] = target
                entry["reached" + suffix] = None if i is None else {
                    "epoch": rows[i]["epoch"], "wall_sec": rows[i]["wall_sec"], "steps": rows[i]["steps"],
                    "wall_ratio_to_target_arm": rows[i]["wall_sec"] / ref_row["wall_sec"],
                }
    return results


def paired_difference(values: List[float], references: List[float]) -> Dict[str, float]:
    """Mean of the per-seed differences ``value - reference`` with a two-sided 95 % interval.

    The interval is Student's t for the mean of paired differences (``scipy.stats.t``, ``n - 1``
    degrees of freedom): ``mean ± t_0.975(n-1) × sd / sqrt(n)``; with one seed (no spread to
    estimate) its half-width is NaN.  An interval that contains 0 means the arms cannot be told
    apart at this number of seeds.

    Returns:
        ``{"mean", "ci95", "low", "high", "seeds"}`` (``ci95`` the half-width; NaN without data).
    """
    import numpy as np
    from scipy import stats

    d = np.asarray(values, dtype=float) - np.asarray(references, dtype=float)
    d = d[np.isfinite(d)]
    n = int(d.size)
    if n == 0:
        return {"mean": float("nan"), "ci95": float("nan"), "low": float("nan"), "high": float("nan"), "seeds": 0}
    mean = float(d.mean())
    half = float(stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return {"mean": mean, "ci95": half, "low": mean - half, "high": mean + half, "seeds": n}


def seed_means(results: dict) -> Dict[str, List[dict]]:
    """Per arm and epoch, over the seeds in which both the arm and the target arm have that epoch:
    mean wall-clock, mean valid figures, and in how many seeds the arm is at least as good as the
    target arm at that epoch.

    Returns ``{arm: [{"epoch", "seeds", "wall_sec", "acc_token", "ter_ctc_token", "att_loss_target",
    "seeds_ctc_not_behind", "seeds_acc_not_behind", "seeds_att_loss_not_behind",
    "wall_ratio_to_target_arm"}, ...]}``;
    ``wall_ratio_to_target_arm`` is the mean over seeds of the arm's wall-clock at that epoch over
    the target arm's in the same seed (only meaningful where the arms of a seed ran side by side);
    ``diff_<metric>`` the mean per-seed difference to the target arm with its 95 % interval
    (:func:`paired_difference`).
    A seed-to-seed spread larger than the difference between arms shows up as split counts.
    """
    nan = float("nan")
    ref = results["arms"][results["target_arm"]]
    out: Dict[str, List[dict]] = {}
    for arm, seeds in results["arms"].items():
        common = [s for s in seeds if s in ref]
        rows = []
        epochs = sorted({r["epoch"] for s in common for r in seeds[s]["epochs"]})
        for epoch in epochs:
            pairs = []
            for s in common:
                mine = [r for r in seeds[s]["epochs"] if r["epoch"] == epoch]
                theirs = [r for r in ref[s]["epochs"] if r["epoch"] == epoch]
                if mine and theirs:
                    pairs.append((mine[0], theirs[0]))
            if not pairs:
                continue

            def mean(key):
                return sum(mine.get(key, nan) for mine, _ in pairs) / len(pairs)

            rows.append({
                "epoch": epoch, "seeds": len(pairs), "wall_sec": mean("wall_sec"),
                "acc_token": mean("acc_token"), "ter_ctc_token": mean("ter_ctc_token"),
                "att_loss_target": mean("att_loss_target"),
                **{count: sum(not_behind(a.get(key, nan), b.get(key, nan), METRICS[key]) for a, b in pairs)
                   for key, count in NOT_BEHIND.items()},
                "wall_ratio_to_target_arm": sum(a["wall_sec"] / b["wall_sec"] for a, b in pairs) / len(pairs),
                **{f"diff_{key}": paired_difference([a.get(key, nan) for a, _ in pairs],
                                                    [b.get(key, nan) for _, b in pairs]) for key in METRICS},
            })
        out[arm] = rows
    return out


def protocol_lines(results: dict) -> List[str]:
    """The report's first lines: per arm, each :func:`training_protocol` its seeds trained under."""
    lines = []
    for arm, seeds in results["arms"].items():
        groups: Dict[str, List[str]] = {}  # the protocol, as JSON -> its seeds
        for seed, entry in seeds.items():
            groups.setdefault(json.dumps(entry.get("protocol"), sort_keys=True), []).append(str(seed))
        for key, listed in groups.items():
            p = json.loads(key)
            where = f"`{arm}`, seed{'s' if len(listed) > 1 else ''} {', '.join(listed)}"
            if p is None:
                lines.append(f"- {where}: protocol not recorded (a report from before the tool recorded it)")
                continue
            said = "; ".join(p["deviations"] + p["notes"]) or "as run.sh trains its config"
            state = "**not run.sh's protocol**" if p["deviations"] else "protocol"
            lines.append(f"- {where}: {state}: {said} (max_epoch {p['max_epoch']}, keep_nbest_models "
                         f"{p.get('keep_nbest_models', '—')}, "
                         f"num_iters_per_epoch {p.get('num_iters_per_epoch', '—')})")
    return lines + [""]


def markdown(results: dict) -> str:
    rule = results.get("target_rule", "best")
    described = {"best": "the best valid", "last_two_mean": "the mean of the last two epochs' valid"}[rule]
    lines = protocol_lines(results) + [
             f"Target: {described} `{results['metric']}` of `{results['target_arm']}` in the same seed "
             f"(rule `{rule}`); the last column: where its single best epoch is first reached.", "",
             "| arm | seed | target | reached at epoch | wall-clock s | steps | × target arm's time | test WER % (S/D/I) "
             "| wall-clock s, last epoch | encoder input frames / epoch | peak RSS GiB, training / decoding "
             "| best target: epoch, × time |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, seeds in results["arms"].items():
        for seed, e in seeds.items():
            r, t, last = e.get("reached"), e.get("test") or {}, e["epochs"][-1]
            reached = ("not reached", "—", "—", "—") if r is None else (
                str(r["epoch"]), f"{r['wall_sec']:.0f}", str(r["steps"]), f"{r['wall_ratio_to_target_arm']:.2f}")
            rb = e.get("reached_best")
            at_best = "—" if "best_target" not in e else (
                f"{e['best_target']:.3f}: not reached" if rb is None
                else f"{e['best_target']:.3f}: {rb['epoch']}, {rb['wall_ratio_to_target_arm']:.2f}")
            wer = f"{t['wer']:.2f} ({t.get('S', '?')}/{t.get('D', '?')}/{t.get('I', '?')})" if "wer" in t else "—"
            frames = last.get("encoder_input_frames")
            frames_per_epoch = "—" if frames is None else f"{frames / last['epoch']:,.0f}"
            memory = " / ".join("—" if e.get(k) is None else f"{e[k]:.2f}"
                                for k in ("train_peak_rss_gib", "decode_peak_rss_gib"))
            lines.append(f"| {arm} | {seed} | {e['target']:.3f} | {' | '.join(reached)} | {wer} "
                         f"| {last['wall_sec']:.0f} | {frames_per_epoch} | {memory} | {at_best} |")
    lines += summary_table(results)
    lines += test_set_table(results)
    nan = float("nan")
    lines += ["", "| arm | seed | epoch | wall-clock s | steps | valid acc (all targets) | valid CTC WER "
              "| valid att. loss / target | `<eos>` argmax share |",
              "|---|---|---|---|---|---|---|---|---|"]
    for arm, seeds in results["arms"].items():
        for seed, e in seeds.items():
            for r in e["epochs"]:
                lines.append(f"| {arm} | {seed} | {r['epoch']} | {r['wall_sec']:.0f} | {r['steps']} "
                             f"| {r.get('acc_token', nan):.3f} | {r.get('ter_ctc_token', nan):.3f} "
                             f"| {r.get('att_loss_target', nan):.3f} | {r.get('eos_prediction_share', nan):.2f} |")
    means = seed_means(results)
    if any(row["seeds"] > 1 for rows in means.values() for row in rows):
        ref = results["target_arm"]
        lines += ["", f"Mean over seeds; \"not behind\": seeds in which the arm's figure is at least `{ref}`'s "
                  "at the same epoch.", "",
                  f"| arm | epoch | seeds | mean wall-clock s | × `{ref}`'s | mean valid acc | not behind (acc) "
                  "| mean valid CTC WER | not behind (CTC) | mean valid att. loss / target | not behind (att. loss) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for arm, rows in means.items():
            for r in rows:
                lines.append(f"| {arm} | {r['epoch']} | {r['seeds']} | {r['wall_sec']:.0f} "
                             f"| {r['wall_ratio_to_target_arm']:.2f} | {r['acc_token']:.3f} "
                             f"| {r['seeds_acc_not_behind']}/{r['seeds']} | {r['ter_ctc_token']:.3f} "
                             f"| {r['seeds_ctc_not_behind']}/{r['seeds']} | {r.get('att_loss_target', nan):.3f} "
                             f"| {r.get('seeds_att_loss_not_behind', 0)}/{r['seeds']} |")
        lines += ["", f"Paired difference to `{ref}` (arm − `{ref}`, same seed and epoch): mean and two-sided "
                  "95 % interval (Student's t over seeds). CTC WER and attention loss: negative is ahead; "
                  "accuracy: positive is ahead. An interval containing 0: not told apart at this many seeds.", "",
                  "| arm | epoch | seeds | Δ valid CTC WER | Δ valid acc | Δ valid att. loss / target |",
                  "|---|---|---|---|---|---|"]

        def ci(d):
            return f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" if d["seeds"] > 1 else f"{d['mean']:+.3f}"

        for arm, rows in means.items():
            if arm == ref:
                continue
            for r in rows:
                lines.append(f"| {arm} | {r['epoch']} | {r['seeds']} | {ci(r['diff_ter_ctc_token'])} "
                             f"| {ci(r['diff_acc_token'])} | {ci(r['diff_att_loss_target'])} |")
    return "\n".join(lines)


def summary_table(results: dict) -> List[str]:
    """One table, per arm: a row per seed and a row of means over seeds.

    Columns: wall-clock per epoch (the last epoch's wall-clock over its epoch count, validation
    included), encoder input frames per epoch, the epoch, steps and wall-clock at which the arm first
    reaches the target (``reached``) and that wall-clock as a multiple of the target arm's in the same
    seed, the epoch and multiple at the target arm's single best epoch (``reached_best``), and test WER
    and CER with S/D/I.  The mean row averages steps and multiples over the seeds that reached the
    target (``k/n``; a seed that did not reach it is left out of the mean multiple) with the multiple's
    95 % interval, and gives WER and CER with the mean paired difference to the target arm and its
    95 % interval (:func:`paired_difference`).
    """
    nan = float("nan")
    ref = results["target_arm"]
    lines = ["", f"Per arm, seed and mean over seeds (mean rows: paired difference arm − `{ref}` [95 % interval]).",
             "", "| arm | seed | s / epoch | encoder input frames / epoch | target reached: epoch, steps "
             f"| time to target s (× `{ref}`'s) | `{ref}`'s best epoch reached: epoch (× time) "
             "| test WER % (S/D/I) | test CER % (S/D/I) |", "|---|---|---|---|---|---|---|---|---|"]

    def num(x, fmt):
        return "—" if x != x else format(x, fmt)

    def per_epoch(e, key):
        last = e["epochs"][-1]
        return nan if last.get(key) is None else last[key] / last["epoch"]

    def score(t, key, prefix):
        if key not in t:
            return "—"
        return f"{t[key]:.2f} ({t.get(prefix + 'S', '?')}/{t.get(prefix + 'D', '?')}/{t.get(prefix + 'I', '?')})"

    def ratio(e, key):
        r = e.get(key)
        return nan if r is None else r["wall_ratio_to_target_arm"]

    def ci(d, fmt):
        if not d["seeds"]:
            return "—"
        mean = format(d["mean"], fmt)
        return f"{mean} [{format(d['low'], fmt)}, {format(d['high'], fmt)}]" if d["seeds"] > 1 else mean

    for arm, seeds in results["arms"].items():
        for seed, e in seeds.items():
            r, rb, t = e.get("reached"), e.get("reached_best"), e.get("test") or {}
            lines.append(
                f"| {arm} | {seed} | {num(per_epoch(e, 'wall_sec'), '.0f')} | {num(per_epoch(e, 'encoder_input_frames'), ',.0f')} "
                + ("| not reached | — " if r is None else
                   f"| {r['epoch']}, {r['steps']} | {r['wall_sec']:.0f} ({r['wall_ratio_to_target_arm']:.2f}×) ")
                + ("| not reached " if rb is None else f"| {rb['epoch']} ({rb['wall_ratio_to_target_arm']:.2f}×) ")
                + f"| {score(t, 'wer', '')} | {score(t, 'cer', 'cer_')} |")
        ids = list(seeds)
        reached = [seeds[s]["reached"] for s in ids if seeds[s].get("reached")]
        refs = results["arms"][ref]

        def values(arm_seeds, key, pick):
            return [pick(arm_seeds[s], key) if s in arm_seeds else nan for s in ids]

        def test_value(e, key):
            return (e.get("test") or {}).get(key, nan)

        def mean_of(xs):
            xs = [x for x in xs if x == x]
            return sum(xs) / len(xs) if xs else nan

        cells = [num(mean_of([per_epoch(seeds[s], 'wall_sec') for s in ids]), ".0f"),
                 num(mean_of([per_epoch(seeds[s], 'encoder_input_frames') for s in ids]), ",.0f"),
                 f"{len(reached)}/{len(ids)} seeds, {num(mean_of([r['steps'] for r in reached]), '.0f')} steps"]
        if arm == ref:
            cells += ["1.00×", "—",
                      num(mean_of([test_value(seeds[s], 'wer') for s in ids]), ".2f"),
                      num(mean_of([test_value(seeds[s], 'cer') for s in ids]), ".2f")]
        else:
            # the multiple itself (difference to 0) over the seeds that reached the target
            cells += [ci(paired_difference(values(seeds, "reached", ratio), [0.0] * len(ids)), ".2f") + "×",
                      ci(paired_difference(values(seeds, "reached_best", ratio), [0.0] * len(ids)), ".2f") + "×"]
            for key in ("wer", "cer"):
                mine, theirs = values(seeds, key, test_value), values(refs, key, test_value)
                d = paired_difference(mine, theirs)
                cells.append("—" if not d["seeds"] else f"{num(mean_of(mine), '.2f')}, Δ {ci(d, '+.2f')}")
        lines.append(f"| **{arm}** | mean | " + " | ".join(cells) + " |")
    return lines


def test_set_table(results: dict) -> List[str]:
    """Test WER % per scored test set and arm: the mean over seeds, and the mean paired difference to
    the target arm with its 95 % interval (:func:`paired_difference`); empty without test sets."""
    ref = results["target_arm"]
    rows = results["arms"]
    sets = sorted({name for seeds in rows.values() for e in seeds.values() for name in e.get("test_sets", {})})
    if not sets:
        return []

    def wer(arm, seed, name):
        r = (rows[arm].get(seed) or {}).get("test_sets", {}).get(name)
        return float("nan") if r is None else r["wer"]

    lines = ["", f"Test WER % per test set: mean over seeds (seeds), and the paired difference arm − `{ref}` "
             "with its 95 % interval.", "", "| arm | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    for arm, seeds in rows.items():
        cells = []
        for name in sets:
            mine = [wer(arm, s, name) for s in seeds]
            known = [v for v in mine if v == v]
            cell = "—" if not known else f"{sum(known) / len(known):.2f} ({len(known)})"
            if arm != ref and known:
                d = paired_difference(mine, [wer(ref, s, name) for s in seeds])
                if d["seeds"]:
                    cell += (f", {d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]" if d["seeds"] > 1
                             else f", {d['mean']:+.2f}")
            cells.append(cell)
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


def plot(results: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("ter_ctc_token", "acc_token", "att_loss_target")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    means = results.get("seed_means") or seed_means(results)
    for k, (arm, seeds) in enumerate(results["arms"].items()):
        colour = colours[k % len(colours)]
        several = len(seeds) > 1
        for e in seeds.values():
            minutes = [r["wall_sec"] / 60 for r in e["epochs"]]
            kw = dict(color=colour, lw=0.8, alpha=0.35, ms=2) if several else dict(color=colour, ms=4, label=arm)
            for ax, key in zip(axes, keys):
                ax.plot(minutes, [r.get(key, float("nan")) for r in e["epochs"]], "-o", **kw)
        if several and means.get(arm):
            minutes = [r["wall_sec"] / 60 for r in means[arm]]
            label = f"{arm} (mean of {max(r['seeds'] for r in means[arm])} seeds)"
            for ax, key in zip(axes, keys):
                ax.plot(minutes, [r.get(key, float("nan")) for r in means[arm]], "-o", color=colour, lw=2.2, ms=5,
                        label=label)
    axes[0].set_ylabel("valid CTC greedy WER")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("valid attention accuracy (all targets)")
    axes[2].set_ylabel("valid attention loss per target (label-smoothed)")
    for ax in axes:
        ax.set_xlabel("wall-clock since training start (min, validation included)")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle("time to accuracy (thin: each seed; bold: mean over seeds at each epoch)", fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe_dir", type=Path, default=HERE.parent / "egs2" / "fsdd_digits" / "asr1")
    p.add_argument("--datadir", type=Path, help="the recipe's --datadir (stages 1-5 done)")
    p.add_argument("--dumpdir", type=Path, help="the recipe's --dumpdir")
    p.add_argument("--expdir", type=Path, help="the recipe's --expdir (stage 10 stats in it)")
    p.add_argument("--out_dir", type=Path, required=True)
    p.add_argument("--arm", action="append", help="name=train_config.yaml (repeatable)")
    p.add_argument("--eval_rate_variant", action="append", default=[],
                   help="NAME=ARM:RATE_HZ (repeatable): the trained dynres ARM evaluated at RATE_HZ instead, as an arm "
                        "of its own: BatchNorm re-estimated and validated at that rate for every epoch checkpoint, its "
                        "averaged model re-estimated and decoded at it (no training: the same weights)")
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="instead of training: the time_to_accuracy.json files of earlier runs (e.g. one per pair of "
                        "arms and seed), merged into one report with --target_arm (default: the first file's first "
                        "arm) and --target_rule; with --expdir, test scores are read again from the experiments")
    p.add_argument("--target_arm", default=None, help="reference arm (default: the first)")
    p.add_argument("--metric", default="ter_ctc_token", choices=sorted(METRICS))
    p.add_argument("--target_rule", default="last_two_mean", choices=TARGET_RULES,
                   help="the target the reference arm's curve sets (see target_value); its single best epoch is "
                        "reported as well")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--max_epoch", type=int, default=None, help="default: each config's max_epoch (as run.sh)")
    p.add_argument("--asr_args", default="", help="extra training arguments for every arm (with "
                   "--num_iters_per_epoch N an epoch is N steps: its frames are counted so)")
    p.add_argument("--nonstandard_protocol", action="store_true",
                   help="train otherwise than run.sh (training_protocol: short epochs, another checkpoint choice, "
                        "another max_epoch with decoding); the report says so")
    p.add_argument("--at_wallclock_of", default=None, metavar="REPORT.json:ARM",
                   help="also evaluate every arm at ARM's training wall-clock in the same seed, taken from an earlier "
                        "report (e.g. speed perturbation at the main job's training time): the epoch checkpoint "
                        "nearest that time is decoded on every test set and reported as arm <arm>@<ARM>")
    p.add_argument("--recipe_args", default="",
                   help="extra run.sh options for every stage of every arm, e.g. "
                        "\"--speed_perturb_factors '0.9 1.0 1.1'\" (then --stats_dir asr_stats_raw_word_sp)")
    p.add_argument("--parallel", type=int, default=2, help="trainings at once")
    p.add_argument("--threads", type=int, default=1, help="OMP threads per training")
    p.add_argument("--rotate_cpus_sec", type=float, default=0.0,
                   help="with --threads 1: every this many seconds, move each running training to the next CPU "
                        "(CpuRotation), so that CPUs of unequal speed slow every arm alike; 0 = off (Linux)")
    p.add_argument("--ngpu", type=int, default=0)
    p.add_argument("--num_train", type=int, default=3000)
    p.add_argument("--fs", default="16k")
    p.add_argument("--token_type", default="word")
    p.add_argument("--stats_dir", default="asr_stats_raw_word")
    p.add_argument("--inference_config", type=Path, default=None,
                   help="default: <recipe_dir>/conf/decode_asr_ctc_greedy.yaml")
    p.add_argument("--valid_dir", type=Path, default=None, help="default: <dumpdir>/raw/dev")
    p.add_argument("--tag_prefix", default="tta_", help="experiment dirs are <expdir>/asr_<prefix><arm>_s<seed>")
    p.add_argument("--retrain", action="store_true")
    p.add_argument("--skip_decode", action="store_true")
    p.add_argument("--decode_recipe_args", default="",
                   help="extra run.sh options for decoding, e.g. \"--test_tempo 0.8,0.9,1.1,1.25\" (its stage 1 "
                        "must have written those sets); every scored test set is reported")
    return p


def merge_results(paths: List[Path], target_arm: Optional[str], target_rule: str) -> dict:
    """One report from several ``time_to_accuracy.json`` files (arms and seeds trained in separate runs):
    every ``(arm, seed)`` entry as recorded, the targets computed again for ``target_arm`` (default: the
    first file's first arm) under ``target_rule`` (:func:`add_targets`), and the seed means.

    Raises:
        ValueError: files of different metrics, an ``(arm, seed)`` in two files, or a ``target_arm``
            missing a seed that another arm has (named).
    """
    results: dict = {"arms": {}, "target_rule": target_rule, "merged_from": [Path(p).name for p in paths]}
    for path in paths:
        r = json.loads(Path(path).read_text())
        metric = results.setdefault("metric", r["metric"])
        if r["metric"] != metric:
            raise ValueError(f"{path} measures {r['metric']}, the files before it {metric}: merge one metric")
        results.setdefault("target_arm", target_arm or next(iter(r["arms"])))
        for arm, seeds in r["arms"].items():
            for seed, entry in seeds.items():
                if int(seed) in results["arms"].setdefault(arm, {}):
                    raise ValueError(f"{path}: arm {arm} seed {seed} is in an earlier file too; merge each run once")
                results["arms"][arm][int(seed)] = {k: v for k, v in entry.items()
                                                   if k not in ("target", "reached", "best_target", "reached_best")}
    ref = results["target_arm"]
    seeds = sorted({s for entries in results["arms"].values() for s in entries})
    missing = [s for s in seeds if s not in results["arms"].get(ref, {})]
    if missing:
        raise ValueError(f"target arm {ref!r} has no run for seed(s) {missing}; merge its file or choose --target_arm")
    for arm, entries in results["arms"].items():
        results["arms"][arm] = dict(sorted(entries.items()))
    add_targets(results, list(results["arms"]), seeds)
    results["seed_means"] = seed_means(results)
    return results


def write_report(results: dict, out_dir: Path) -> str:
    """``time_to_accuracy.json``, ``.md`` and ``.png`` in ``out_dir``; returns the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "time_to_accuracy.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    (out_dir / "time_to_accuracy.md").write_text(table + "\n")
    plot(results, out_dir / "time_to_accuracy.png")
    return table


def main(argv=None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.merge:
        results = merge_results(args.merge, args.target_arm, args.target_rule)
        if args.expdir is not None:  # the scores as the recipe wrote them (a file may predate a column, CER say)
            args.expdir = args.expdir.resolve()
            args.inference_config = (args.inference_config
                                     or args.recipe_dir.resolve() / "conf" / "decode_asr_ctc_greedy.yaml")
            for arm, entries in results["arms"].items():
                for seed, entry in entries.items():
                    tag = arm_tag(args, arm, seed)
                    entry["test"] = parse_wer(score_dir(args, tag)) or entry.get("test")
                    entry["test_sets"] = parse_test_sets(args, tag) or entry.get("test_sets", {})
        print(write_report(results, args.out_dir))
        return 0
    missing = [f"--{k}" for k in ("datadir", "dumpdir", "expdir", "arm") if not getattr(args, k)]
    if missing:
        parser.error(f"training arms needs {', '.join(missing)} (or give --merge)")
    arms: Dict[str, Path] = {}
    for spec in args.arm:
        name, sep, path = spec.partition("=")
        if not sep or not name or not Path(path).is_file():
            raise SystemExit(f"--arm needs name=existing_config.yaml, got {spec!r}")
        arms[name] = Path(path)
    args.protocols = {arm: training_protocol(cfg, args.max_epoch, args.asr_args, decode=not args.skip_decode)
                      for arm, cfg in arms.items()}
    deviating = {arm: p["deviations"] for arm, p in args.protocols.items() if p["deviations"]}
    if deviating and not args.nonstandard_protocol:
        raise SystemExit("these arms would train otherwise than run.sh trains their config: "
                         + "; ".join(f"{arm}: {', '.join(d)}" for arm, d in deviating.items())
                         + ". Drop those options, or pass --nonstandard_protocol to measure it so (the report says so)")
    args.target_arm = args.target_arm or next(iter(arms))
    if args.target_arm not in arms:
        raise SystemExit(f"--target_arm {args.target_arm!r} is not one of the arms {list(arms)}")
    for name in ("datadir", "dumpdir", "expdir", "out_dir"):
        setattr(args, name, getattr(args, name).resolve())
    args.recipe_dir = args.recipe_dir.resolve()
    args.inference_config = (args.inference_config or args.recipe_dir / "conf" / "decode_asr_ctc_greedy.yaml").resolve()
    args.valid_dir = (args.valid_dir or args.dumpdir / "raw" / "dev").resolve()
    if not (args.expdir / args.stats_dir / "train" / "feats_stats.npz").exists():
        raise SystemExit(f"no {args.expdir / args.stats_dir}/train/feats_stats.npz: run the recipe's stages 1-10 first")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(arm, cfg, seed) for seed in args.seeds for arm, cfg in arms.items()]
    start = time.time()
    args.rotation = CpuRotation(args.rotate_cpus_sec).start() if args.rotate_cpus_sec > 0 else None
    try:
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            for f in [pool.submit(train_arm, args, *job) for job in jobs]:
                f.result()
    finally:
        if args.rotation is not None:
            args.rotation.stop()
    print(f"training done in {time.time() - start:.0f} s", flush=True)
    if not args.skip_decode:
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            for f in [pool.submit(decode_arm, args, arm, seed) for arm, _, seed in jobs]:
                f.result()
    for name, (base, rate_hz) in parse_eval_rate_variants(args.eval_rate_variant, arms).items():
        for seed in args.seeds:
            prepare_eval_rate_variant(args, name, base, rate_hz, seed)
    results = report(args, arms)
    reference = parse_at_wallclock(args.at_wallclock_of)
    if reference is not None:
        for arm in arms:
            for seed in args.seeds:
                results["arms"].setdefault(f"{arm}@{reference[1]}", {})[seed] = at_wallclock_entry(
                    args, arm, seed, results["arms"][arm][seed], reference)
        results = add_targets(results, list(results["arms"]), args.seeds)
    results["seed_means"] = seed_means(results)
    print(write_report(results, args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
