#!/usr/bin/env python3
"""Training-step benchmark: dynres (sampler + frontend + token-normalized loss) vs the numel baseline.

Usage (one command, see benchmarks/run_gpu_benchmark.sh and docs/benchmarking.md):

    python benchmarks/gpu_benchmark.py --device cuda                  # the measurement (~5 min on one H200)
    python benchmarks/gpu_benchmark.py --device cpu --dry_run         # tiny sizes, same code paths (CI)

What runs, in one process and on the same data:

* **data**: the recipe's stages 1, 3, 4, 5 (``egs2/fsdd_digits/asr1/run.sh``:
  connected FSDD digits, 16 kHz, word tokens) into ``--work_dir``, or an
  existing dump given by ``--dump_dir`` / ``--token_list``.  Shape files
  (``speech_shape``: samples, ``text_shape.word``: ``tokens,vocab``) are
  written from ``utt2num_samples`` and ``text``, as stage 10 writes them.
* **dynres**: ``--config`` (default ``conf/train_asr_conformer_dynres.yaml``) as
  it is: ``batch_type: dynres``, ``frontend: dynres``, ``model: token_normalized``.
* **baseline**: the same YAML with ``batch_type: numel``, ``batch_bins`` ×
  ``hop_length`` (frames → samples: the same seconds of audio per batch),
  ``frontend: default`` (the dynres-only keys dropped), ``model: espnet``.
  Same encoder, decoder, SpecAugment, optimizer and scheduler; both
  ``normalize: utterance_mvn`` (ESPnet's default; no stage 10 stats needed).
* **training**: ESPnet builds the model, optimizer, scheduler and the training
  iterator (``ASRTask.build_model`` / ``build_optimizers`` /
  ``build_iter_factory``, so the plugin's sampler and collate run as in
  ``asr_train``); the loop mirrors ``espnet2/train/trainer.py``'s
  ``train_one_epoch`` with ``--use_amp true``: ``torch.autocast`` (bf16 by
  default, fp16 with a ``GradScaler``), backward, ``clip_grad_norm_``
  (``grad_clip``), optimizer and scheduler step.  The two setups alternate
  epoch by epoch so that drifts of clock or temperature hit both alike.
* **per step** (JSON ``steps``): ``loader_wait_sec`` (blocking in ``next()`` on
  ESPnet's DataLoader: reading, collating, and at each epoch start the worker
  start-up), ``step_sec`` (host→device copy, forward, backward, optimizer,
  ``torch.cuda.synchronize()`` at the end), ``frontend_sec`` (CUDA events, or
  the host clock on CPU, around ``model.frontend``), ``audio_sec`` (Σ
  ``speech_lengths`` / fs), ``feature_frames`` and ``feature_padding_frames``
  (frontend output: Σ lengths and B × T − Σ lengths), ``encoder_frames`` and
  ``encoder_padding_frames`` (likewise after the encoder), ``peak_alloc_bytes``
  (``torch.cuda.max_memory_allocated`` in the step, after resetting it at the
  step start) and ``peak_step_bytes`` (that peak minus what was allocated at the
  step start: activations, gradients, temporaries; both models' weights and
  optimizer states are resident throughout, so this is the comparable figure).
* **summary**: over steps after the ``--warmup_steps`` first of each setup:
  throughput (audio seconds per wall second, loader wait included, and per
  step second), peak memory, frontend share of step time, loader share of wall
  time, padding share; ratios dynres / baseline.
* **largest batch_bins**: a doubling search from each config's ``batch_bins``:
  a size fits when forward + backward + optimizer step run without CUDA
  out-of-memory (and, with ``--memory_limit_gib``, peak below that limit) on
  its three heaviest batches (most padded samples, most utterances, longest
  utterance).  It stops at the first failure, after ``--search_doublings``,
  when the batches stop growing (the data set is the limit), or when the time
  budget is spent; the report says which.

Writes ``gpu_benchmark.json`` and ``gpu_benchmark.md`` to ``--out_dir``.  A dry
run is labelled as such in both: its figures are not measurements.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import yaml

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # benchmarks/common.py, also when this file is imported by path
    sys.path.insert(0, str(HERE))
from common import DEFAULT_FSDD_DIR, fsdd_recordings  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "egs2" / "fsdd_digits" / "asr1"
DEFAULT_CONFIG = REPO / "conf" / "train_asr_conformer_dynres.yaml"
SETUPS = ("dynres", "baseline")
# frontend_conf keys that only the dynres frontend takes.
DYNRES_ONLY_FRONTEND_KEYS = (
    "min_frame_rate_hz", "max_frame_rate_hz", "fallback_frame_rate_hz", "curriculum_epochs",
    "method", "resample_filterbank", "resample_grid_hz",
)
# --dry_run: a tiny model and data set, so the same code runs on a CPU in seconds.
DRY_RUN_MODEL = {
    "encoder_conf": dict(output_size=32, attention_heads=2, linear_units=64, num_blocks=1, cnn_module_kernel=15),
    "decoder_conf": dict(attention_heads=2, linear_units=64, num_blocks=1),
}
DRY_RUN_BATCH_BINS = 1500  # frames, B x T (15 s of audio at 100 Hz)
GIB = 1024**3


# ------------------------------------------------------------------ configs
def derive_baseline_config(dynres_conf: Dict) -> Dict:
    """The baseline YAML: ``dynres_conf`` with ESPnet's stock sampler, frontend and loss.

    ``batch_bins`` (frames ``B × T``) becomes samples incl. padding
    (``× hop_length``), numel's unit for a 1-dim speech shape: the same seconds
    of audio per batch.  Everything else (model, SpecAugment, optimizer) is kept.

    Raises:
        ValueError: ``dynres_conf`` is not a dynres config (batch_type, frontend).
    """
    if dynres_conf.get("batch_type") != "dynres" or dynres_conf.get("frontend") != "dynres":
        raise ValueError(
            "--config must use batch_type: dynres and frontend: dynres (the baseline is derived from it), got "
            f"batch_type={dynres_conf.get('batch_type')!r}, frontend={dynres_conf.get('frontend')!r}"
        )
    conf = copy.deepcopy(dynres_conf)
    frontend_conf = dict(conf.get("frontend_conf") or {})
    hop_length = int(frontend_conf.get("hop_length", 160))
    conf["batch_type"] = "numel"
    conf["batch_bins"] = int(conf["batch_bins"]) * hop_length
    conf["frontend"] = "default"
    conf["frontend_conf"] = {k: v for k, v in frontend_conf.items() if k not in DYNRES_ONLY_FRONTEND_KEYS}
    conf["model"] = "espnet"
    if conf.get("specaug") == "dynres":
        conf["specaug"] = "specaug"
    return conf


def batch_bins_seconds(setup: str, batch_bins: int, conf: Dict, fs_hz: int) -> float:
    """``batch_bins`` as seconds of audio: frames / frame rate (dynres) or samples / fs (numel)."""
    if setup == "dynres":
        hop = int((conf.get("frontend_conf") or {}).get("hop_length", 160))
        return batch_bins * hop / fs_hz
    return batch_bins / fs_hz


# ------------------------------------------------------------------ data
def prepare_data(work_dir: Path, fsdd_dir: Path, num_train: int, python: str) -> Tuple[Path, Path]:
    """Recipe stages 1, 3, 4, 5 into ``work_dir`` (skipped when already there for ``num_train``).

    Returns:
        ``(dump_dir, token_list)``: ``dump_dir`` holds ``train/{wav.scp,text,utt2num_samples}``.

    Raises:
        FileNotFoundError: no FSDD recordings under ``fsdd_dir``.
        RuntimeError: a recipe stage failed (its log tail in the message).
    """
    dump_dir = work_dir / "dump" / "raw"
    token_list = work_dir / "data" / "token_list" / "word" / "tokens.txt"
    stamp = work_dir / f".data_num_train_{num_train}"
    if stamp.exists() and token_list.exists() and (dump_dir / "train" / "wav.scp").exists():
        return dump_dir, token_list
    fsdd_recordings(fsdd_dir, hint="or an existing recipe dump with --dump_dir and --token_list")
    cmd = [
        "bash", str(RECIPE / "run.sh"), "--stage", "1", "--stop_stage", "5",
        "--num_train", str(num_train), "--num_dev", "4", "--num_test", "2",
        "--datadir", str(work_dir / "data"), "--dumpdir", str(work_dir / "dump"), "--expdir", str(work_dir / "exp"),
        "--fsdd_dir", str(fsdd_dir.resolve()), "--python", python,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"recipe stages 1-5 failed ({' '.join(cmd)}):\n{(out.stdout + out.stderr)[-3000:]}")
    stamp.write_text("ok\n")
    return dump_dir, token_list


def write_shape_files(dump_dir: Path, token_list: Path, out_dir: Path) -> Tuple[Path, Path]:
    """``speech_shape`` (``utt samples``) and ``text_shape.word`` (``utt tokens,vocab``) for ``train``.

    Raises:
        ValueError: an utterance of ``text`` missing from ``utt2num_samples`` (named).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    samples = {}
    for line in (dump_dir / "train" / "utt2num_samples").read_text().splitlines():
        utt, n = line.split()
        samples[utt] = int(n)
    vocab = len(token_list.read_text().splitlines())
    speech_lines, text_lines = [], []
    for line in (dump_dir / "train" / "text").read_text().splitlines():
        parts = line.split()
        if parts[0] not in samples:
            raise ValueError(f"utterance {parts[0]} is in {dump_dir}/train/text but not in utt2num_samples; rerun stage 3")
        speech_lines.append(f"{parts[0]} {samples[parts[0]]}\n")
        text_lines.append(f"{parts[0]} {len(parts) - 1},{vocab}\n")
    speech_shape, text_shape = out_dir / "speech_shape", out_dir / "text_shape.word"
    speech_shape.write_text("".join(speech_lines))
    text_shape.write_text("".join(text_lines))
    return speech_shape, text_shape


def espnet_args(config: Path, dump_dir: Path, token_list: Path, shapes: Tuple[Path, Path], out_dir: Path,
                ngpu: int, num_workers: Optional[int]) -> argparse.Namespace:
    """``asr_train``'s arguments for ``config`` on the train set, as run.sh stage 11 gives them."""
    from espnet2.tasks.asr import ASRTask

    argv = [
        "--config", str(config), "--output_dir", str(out_dir), "--ngpu", str(ngpu),
        "--use_preprocessor", "true", "--token_type", "word", "--token_list", str(token_list), "--bpemodel", "none",
        "--train_data_path_and_name_and_type", f"{dump_dir}/train/wav.scp,speech,sound",
        "--train_data_path_and_name_and_type", f"{dump_dir}/train/text,text,text",
        "--valid_data_path_and_name_and_type", f"{dump_dir}/train/wav.scp,speech,sound",
        "--valid_data_path_and_name_and_type", f"{dump_dir}/train/text,text,text",
        "--train_shape_file", str(shapes[0]), "--train_shape_file", str(shapes[1]),
        "--valid_shape_file", str(shapes[0]), "--valid_shape_file", str(shapes[1]),
        "--frontend_conf", "fs=16k",
    ]
    if num_workers is not None:
        argv += ["--num_workers", str(num_workers)]
    return ASRTask.get_parser().parse_args(argv)


# ------------------------------------------------------------------ measurement
class StepProbe:
    """Forward hooks on the frontend and the encoder: frontend time and frame counts of one step."""

    def __init__(self, model, device):
        self.cuda = device.type == "cuda"
        self.reset()
        model.frontend.register_forward_pre_hook(self._frontend_start)
        model.frontend.register_forward_hook(self._frontend_end)
        model.encoder.register_forward_hook(self._encoder_end)

    def reset(self) -> None:
        self.frontend_events: List = []
        self.frontend_host_sec = 0.0
        self.feature_frames = self.feature_padding_frames = 0
        self.encoder_frames = self.encoder_padding_frames = 0

    def _now(self):
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def _frontend_start(self, module, inputs):
        self._start = self._now()

    def _frontend_end(self, module, inputs, output):
        end = self._now()
        if self.cuda:
            self.frontend_events.append((self._start, end))
        else:
            self.frontend_host_sec += end - self._start
        feats, lengths = output[0], output[1]
        self.feature_frames += int(lengths.sum())
        self.feature_padding_frames += int(feats.size(0) * feats.size(1) - lengths.sum())

    def _encoder_end(self, module, inputs, output):
        out, lengths = output[0], output[1]
        self.encoder_frames += int(lengths.sum())
        self.encoder_padding_frames += int(out.size(0) * out.size(1) - lengths.sum())

    def frontend_sec(self) -> float:
        """Frontend time of the step (call after synchronizing)."""
        if self.cuda:
            return sum(s.elapsed_time(e) for s, e in self.frontend_events) / 1000.0
        return self.frontend_host_sec


class Setup:
    """One configuration under test: ESPnet's model, optimizer, scheduler and training iterator."""

    def __init__(self, name: str, args: argparse.Namespace, device, amp_dtype):
        import torch
        from espnet2.tasks.abs_task import scheduler_classes
        from espnet2.tasks.asr import ASRTask
        from espnet2.train.distributed_utils import DistributedOption
        from espnet2.torch_utils.set_all_random_seed import set_all_random_seed
        from espnet2.utils.build_dataclass import build_dataclass

        self.name, self.args, self.device, self.amp_dtype = name, args, device, amp_dtype
        set_all_random_seed(args.seed)
        self.model = ASRTask.build_model(args).to(device=device, dtype=getattr(torch, args.train_dtype))
        self.model.train()
        self.optimizer = ASRTask.build_optimizers(args, self.model)[0]
        self.scheduler = (
            scheduler_classes[args.scheduler](self.optimizer, **(args.scheduler_conf or {})) if args.scheduler else None
        )
        self.scaler = (
            torch.amp.GradScaler("cuda") if (amp_dtype == torch.float16 and device.type == "cuda") else None
        )
        args.distributed = False  # one process, as asr_train without DDP (AbsTask.main sets this)
        self.distributed_option = build_dataclass(DistributedOption, args)
        self.iter_factory = ASRTask.build_iter_factory(args, self.distributed_option, mode="train")
        self.probe = StepProbe(self.model, device)
        from espnet_dynres.core.frame_rate_policy import parse_fs

        self.fs_hz = parse_fs((args.frontend_conf or {}).get("fs", 16000))
        self.steps: List[Dict] = []

    def step(self, utt_ids: Sequence[str], batch: Dict) -> Dict:
        """One training step as ESPnet's trainer runs it; returns its record (timings after synchronize)."""
        import torch
        from espnet2.torch_utils.device_funcs import to_device

        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            resident = torch.cuda.memory_allocated(self.device)
        self.probe.reset()
        start = time.perf_counter()
        speech_lengths = batch["speech_lengths"]
        batch = to_device(batch, self.device)
        batch["utt_id"] = list(utt_ids)
        with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32, enabled=self.amp_dtype is not None):
            loss, stats, weight = self.model(**batch)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=self.args.grad_clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif torch.isfinite(grad_norm):
            self.optimizer.step()  # ESPnet skips the update on a non-finite gradient norm
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(self.device)
        step_sec = time.perf_counter() - start
        record = dict(
            batch_size=int(speech_lengths.numel()),
            step_sec=step_sec,
            frontend_sec=self.probe.frontend_sec(),
            audio_sec=float(speech_lengths.sum()) / self.fs_hz,
            feature_frames=self.probe.feature_frames,
            feature_padding_frames=self.probe.feature_padding_frames,
            encoder_frames=self.probe.encoder_frames,
            encoder_padding_frames=self.probe.encoder_padding_frames,
            loss=float(loss.detach()),
            tokens=int(batch["text_lengths"].sum()),
            frame_rate_fallback=float(stats["frame_rate_fallback"]) if "frame_rate_fallback" in stats else None,
        )
        if cuda:
            peak = torch.cuda.max_memory_allocated(self.device)
            record.update(peak_alloc_bytes=int(peak), peak_step_bytes=int(peak - resident))
        else:
            record.update(peak_alloc_bytes=None, peak_step_bytes=None)
        return record

    def run_epoch(self, epoch: int, max_steps: Optional[int], deadline: float) -> None:
        """Train one epoch (or ``max_steps`` steps), appending a record per step."""
        loader = iter(self.iter_factory.build_iter(epoch))
        taken = 0
        while max_steps is None or taken < max_steps:
            if time.perf_counter() > deadline:
                break
            start = time.perf_counter()
            try:
                utt_ids, batch = next(loader)
            except StopIteration:
                break
            wait = time.perf_counter() - start
            record = self.step(utt_ids, batch)
            record.update(setup=self.name, epoch=epoch, step=len(self.steps) + 1, loader_wait_sec=wait)
            self.steps.append(record)
            taken += 1
        del loader

    # ------------------------------------------------------- batch_bins search
    def heaviest_batches(self, batch_bins: int) -> List[Tuple[List[str], Dict]]:
        """Epoch 1 of the training iterator at ``batch_bins``: the batches that stress memory
        most (most padded samples ``B × max length``, most utterances, longest
        utterance), deduplicated, as ``(utt_ids, collated batch)`` on the host."""
        from espnet2.tasks.asr import ASRTask

        args = copy.copy(self.args)
        args.batch_bins = batch_bins
        factory = ASRTask.build_iter_factory(args, self.distributed_option, mode="train")
        costs = (
            lambda b: int(b["speech_lengths"].numel()) * int(b["speech_lengths"].max()),
            lambda b: int(b["speech_lengths"].numel()),
            lambda b: int(b["speech_lengths"].max()),
        )
        best: List[Optional[Tuple[int, List[str], Dict]]] = [None] * len(costs)
        for utt_ids, batch in factory.build_iter(1):
            for i, cost in enumerate(costs):
                c = cost(batch)
                if best[i] is None or c > best[i][0]:
                    best[i] = (c, list(utt_ids), batch)
        chosen: List[Tuple[List[str], Dict]] = []
        for item in best:
            if item is not None and all(item[1] != ids for ids, _ in chosen):
                chosen.append((item[1], item[2]))
        return chosen

    def try_batch(self, utt_ids: Sequence[str], batch: Dict,
                  memory_limit_bytes: Optional[int]) -> Tuple[bool, Optional[int], str]:
        """Forward + backward + step on one batch. Returns ``(fits, peak_alloc_bytes, reason)``."""
        import torch

        oom = False
        try:
            record = self.step(utt_ids, dict(batch))
        except torch.OutOfMemoryError:
            oom = True
        if oom:  # outside the except block, so the failed step's tensors can be freed
            self.optimizer.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()
            return False, None, "CUDA out of memory"
        peak = record["peak_alloc_bytes"]
        if memory_limit_bytes is not None and peak is not None and peak > memory_limit_bytes:
            return False, peak, f"peak {peak / GIB:.1f} GiB > --memory_limit_gib"
        return True, peak, "fits"


def doubling_search(start: int, probe: Callable[[int], Tuple[bool, bool, str]], max_doublings: int,
                    out_of_time: Callable[[], bool] = lambda: False) -> Dict:
    """Largest ``batch_bins`` in ``start × 2^k`` (``k ≤ max_doublings``) for which ``probe`` fits.

    ``probe(batch_bins)`` returns ``(fits, grew, note)``: ``grew`` is False when
    the heaviest batch is the same as at the previous size (the data set, not
    memory, limits the batch).  The search stops at the first size that does
    not fit, that does not grow, after ``max_doublings``, or when ``out_of_time()``.

    Returns:
        ``{"largest_fitting": int or None, "first_failing": int or None,
        "stopped_because": str, "tried": [{"batch_bins", "fits", "note"}]}``.
    """
    tried: List[Dict] = []
    largest, failing, reason = None, None, f"reached the search cap ({max_doublings} doublings)"
    for k in range(max_doublings + 1):
        if out_of_time():
            reason = "time budget spent"
            break
        bins = start * 2**k
        fits, grew, note = probe(bins)
        tried.append(dict(batch_bins=bins, fits=fits, note=note))
        if not fits:
            failing, reason = bins, f"did not fit: {note}"
            break
        largest = bins
        if not grew and k > 0:
            reason = "batches stopped growing: the data set, not memory, is the limit"
            break
    return dict(largest_fitting=largest, first_failing=failing, stopped_because=reason, tried=tried)


# ------------------------------------------------------------------ summary
def summarize(steps: Sequence[Dict], warmup_steps: int) -> Dict:
    """Totals and shares over the steps after the first ``warmup_steps``.

    Raises:
        ValueError: no step left after the warm-up (more steps or fewer warm-up steps needed).
    """
    kept = [s for s in steps if s["step"] > warmup_steps]
    if not kept:
        raise ValueError(f"no step after the {warmup_steps} warm-up steps ({len(steps)} run); raise --epochs or lower --warmup_steps")

    def total(key):
        return sum(s[key] for s in kept)

    wall = total("step_sec") + total("loader_wait_sec")
    peaks = [s["peak_step_bytes"] for s in kept if s["peak_step_bytes"] is not None]
    allocs = [s["peak_alloc_bytes"] for s in kept if s["peak_alloc_bytes"] is not None]
    frames = total("feature_frames") + total("feature_padding_frames")
    return dict(
        steps=len(kept),
        audio_sec=total("audio_sec"),
        wall_sec=wall,
        throughput_audio_sec_per_sec=total("audio_sec") / wall,
        compute_throughput_audio_sec_per_sec=total("audio_sec") / total("step_sec"),
        median_step_sec=statistics.median(s["step_sec"] for s in kept),
        median_loader_wait_sec=statistics.median(s["loader_wait_sec"] for s in kept),
        frontend_share_of_step=total("frontend_sec") / total("step_sec"),
        loader_share_of_wall=total("loader_wait_sec") / wall,
        feature_padding_share=total("feature_padding_frames") / frames if frames else 0.0,
        encoder_frames_per_audio_sec=total("encoder_frames") / total("audio_sec"),
        encoder_padding_share=total("encoder_padding_frames") / max(1, total("encoder_frames") + total("encoder_padding_frames")),
        peak_step_bytes=max(peaks) if peaks else None,
        peak_alloc_bytes=max(allocs) if allocs else None,
        fallback_batches=sum(1 for s in kept if s.get("frame_rate_fallback")),
        mean_batch_size=statistics.mean(s["batch_size"] for s in kept),
    )


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None or b == 0 else a / b


def ratios(summary: Dict[str, Dict]) -> Dict[str, Optional[float]]:
    """dynres / baseline for the headline quantities."""
    d, b = summary["dynres"], summary["baseline"]
    keys = ("throughput_audio_sec_per_sec", "compute_throughput_audio_sec_per_sec", "peak_step_bytes",
            "peak_alloc_bytes", "median_step_sec")
    return {k: ratio(d[k], b[k]) for k in keys}


def _fmt(value, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "pct":
        return f"{100 * value:.1f} %"
    if kind == "gib":
        return f"{value / GIB:.2f}"
    if kind == "x":
        return f"{value:.2f}x"
    if kind == "int":
        return f"{value:,}"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"


def markdown(report: Dict) -> str:
    """The report's table (the Markdown the run writes)."""
    meta, s, r, search = report["meta"], report["summary"], report["ratios"], report["batch_bins_search"]
    d, b = s["dynres"], s["baseline"]
    head = (
        f"**DRY RUN on {meta['device_name']} — tiny model and data, NOT a measurement.**\n\n"
        if meta["dry_run"] else ""
    )
    lines = [
        head + f"{meta['date_utc']}, {meta['device_name']}, torch {meta['torch']}, autocast {meta['amp_dtype']}, "
        f"{meta['num_train_utts']} training utterances ({meta['train_audio_sec'] / 60:.1f} min), "
        f"{meta['epochs']} epochs per setup alternating, first {meta['warmup_steps']} steps of each excluded.",
        "",
        "| quantity | dynres | baseline | dynres / baseline |",
        "|---|---|---|---|",
        f"| throughput, audio s per wall s (loader wait included) | {_fmt(d['throughput_audio_sec_per_sec'], '')} | "
        f"{_fmt(b['throughput_audio_sec_per_sec'], '')} | {_fmt(r['throughput_audio_sec_per_sec'], 'x')} |",
        f"| throughput, audio s per step s (compute only) | {_fmt(d['compute_throughput_audio_sec_per_sec'], '')} | "
        f"{_fmt(b['compute_throughput_audio_sec_per_sec'], '')} | {_fmt(r['compute_throughput_audio_sec_per_sec'], 'x')} |",
        f"| peak step memory above resident (GiB) | {_fmt(d['peak_step_bytes'], 'gib')} | "
        f"{_fmt(b['peak_step_bytes'], 'gib')} | {_fmt(r['peak_step_bytes'], 'x')} |",
        f"| peak memory allocated, both models resident (GiB) | {_fmt(d['peak_alloc_bytes'], 'gib')} | "
        f"{_fmt(b['peak_alloc_bytes'], 'gib')} | {_fmt(r['peak_alloc_bytes'], 'x')} |",
        f"| frontend share of step time | {_fmt(d['frontend_share_of_step'], 'pct')} | {_fmt(b['frontend_share_of_step'], 'pct')} | |",
        f"| data-loader wait share of wall time | {_fmt(d['loader_share_of_wall'], 'pct')} | {_fmt(b['loader_share_of_wall'], 'pct')} | |",
        f"| padding share of feature frames | {_fmt(d['feature_padding_share'], 'pct')} | {_fmt(b['feature_padding_share'], 'pct')} | |",
        f"| encoder frames per audio second | {_fmt(d['encoder_frames_per_audio_sec'], '')} | {_fmt(b['encoder_frames_per_audio_sec'], '')} | |",
        f"| median step time (s) | {_fmt(d['median_step_sec'], '')} | {_fmt(b['median_step_sec'], '')} | {_fmt(r['median_step_sec'], 'x')} |",
        f"| steps measured / mean utterances per batch | {d['steps']} / {d['mean_batch_size']:.1f} | {b['steps']} / {b['mean_batch_size']:.1f} | |",
    ]
    for name in SETUPS:
        res = search.get(name)
        if not res:
            lines.append(f"| largest batch_bins that fits ({name}) | not searched | | |")
            continue
        unit = "frames B×T" if name == "dynres" else "samples incl. padding"
        fit = res["largest_fitting"]
        sec = f" ({res['largest_fitting_sec']:,.0f} s of audio)" if fit is not None else ""
        lines.append(f"| largest batch_bins that fits, {name} ({unit}) | {_fmt(fit, 'int')}{sec}; "
                     f"stopped: {res['stopped_because']} | | |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ main
def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu")
    ap.add_argument("--dry_run", action="store_true", help="tiny model, data and step counts: checks the code paths")
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the dynres training YAML")
    ap.add_argument("--work_dir", type=Path, default=Path(tempfile.gettempdir()) / "gpu_benchmark", help="data, shape files, results")
    ap.add_argument("--out_dir", type=Path, default=None, help="where the JSON and Markdown go (default WORK_DIR/results)")
    ap.add_argument("--fsdd_dir", type=Path, default=DEFAULT_FSDD_DIR, help="the FSDD recordings (*.wav, 8 kHz)")
    ap.add_argument("--dump_dir", type=Path, default=None, help="an existing recipe dump (dump/raw) instead of stages 1-5")
    ap.add_argument("--token_list", type=Path, default=None, help="with --dump_dir: data/token_list/word/tokens.txt")
    ap.add_argument("--num_train", type=int, default=None, help="training utterances (default 2000; dry run 24)")
    ap.add_argument("--epochs", type=int, default=None, help="epochs per setup (default 3; dry run 2)")
    ap.add_argument("--max_steps_per_epoch", type=int, default=None, help="cut epochs short (dry run 3)")
    ap.add_argument("--warmup_steps", type=int, default=None, help="first steps of each setup left out (default 4; dry run 1)")
    ap.add_argument("--amp_dtype", choices=("bf16", "fp16", "none"), default="bf16")
    ap.add_argument("--num_workers", type=int, default=None, help="DataLoader workers (default: the config's; dry run 0)")
    ap.add_argument("--search_doublings", type=int, default=None, help="batch_bins doublings to try (default 5; dry run 1)")
    ap.add_argument("--memory_limit_gib", type=float, default=None, help="also count a peak above this as not fitting")
    ap.add_argument("--time_budget_sec", type=float, default=420.0, help="stop training/search after this (data prep included)")
    args = ap.parse_args(argv)
    dry = args.dry_run
    defaults = dict(num_train=(24, 2000), epochs=(2, 3), warmup_steps=(1, 4), search_doublings=(1, 5))
    for key, (small, full) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, small if dry else full)
    if dry and args.max_steps_per_epoch is None:
        args.max_steps_per_epoch = 3
    if dry and args.num_workers is None:
        args.num_workers = 0
    if (args.dump_dir is None) != (args.token_list is None):
        ap.error("--dump_dir and --token_list go together")
    args.out_dir = args.out_dir or args.work_dir / "results"
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    opts = parse_args(argv)
    t_start = time.perf_counter()
    deadline = t_start + opts.time_budget_sec
    import torch

    device = torch.device(opts.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_benchmark: --device cuda but torch sees no GPU (torch.cuda.is_available() is False); "
                         "use --device cpu --dry_run to check the code paths")
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}[opts.amp_dtype]
    import espnet_dynres  # noqa: F401  (registers dynres with ESPnet)

    opts.work_dir.mkdir(parents=True, exist_ok=True)
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    if opts.dump_dir is None:
        dump_dir, token_list = prepare_data(opts.work_dir, opts.fsdd_dir, opts.num_train, sys.executable)
    else:
        dump_dir, token_list = opts.dump_dir, opts.token_list
    shapes = write_shape_files(dump_dir, token_list, opts.work_dir / "shapes")
    data_sec = time.perf_counter() - t_start

    dynres_conf = yaml.safe_load(opts.config.read_text())
    if opts.dry_run:
        for key, over in DRY_RUN_MODEL.items():
            dynres_conf[key] = {**(dynres_conf.get(key) or {}), **over}
        dynres_conf["batch_bins"] = DRY_RUN_BATCH_BINS
    confs = {"dynres": dynres_conf, "baseline": derive_baseline_config(dynres_conf)}
    setups: Dict[str, Setup] = {}
    for name in SETUPS:
        path = opts.work_dir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(confs[name], sort_keys=False))
        args = espnet_args(path, dump_dir, token_list, shapes, opts.work_dir / f"exp_{name}",
                           ngpu=int(device.type == "cuda"), num_workers=opts.num_workers)
        setups[name] = Setup(name, args, device, amp_dtype)

    for epoch in range(1, opts.epochs + 1):
        for name in SETUPS:
            setups[name].run_epoch(epoch, opts.max_steps_per_epoch, deadline)
    train_sec = time.perf_counter() - t_start - data_sec
    summary = {name: summarize(setups[name].steps, opts.warmup_steps) for name in SETUPS}

    from espnet_dynres.core.readers import read_shape_file

    train_audio_sec = int(read_shape_file(shapes[0])[1].sum()) / setups["dynres"].fs_hz
    report = dict(
        meta=dict(
            dry_run=opts.dry_run,
            date_utc=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)",
            torch=torch.__version__,
            python=platform.python_version(),
            amp_dtype=opts.amp_dtype,
            config=str(opts.config),
            num_train_utts=len(shapes[0].read_text().splitlines()),
            train_audio_sec=train_audio_sec,
            epochs=opts.epochs,
            warmup_steps=opts.warmup_steps,
            data_prep_sec=data_sec,
            training_sec=train_sec,
            batch_bins={name: setups[name].args.batch_bins for name in SETUPS},
            what_is_timed=("loader_wait_sec: blocking in next() on ESPnet's DataLoader; step_sec: host-to-device copy, "
                           "forward under autocast, backward, grad clip, optimizer and scheduler step, then "
                           "cuda.synchronize; frontend_sec: CUDA events (host clock on CPU) around model.frontend"),
        ),
        summary=summary,
        ratios=ratios(summary),
        batch_bins_search={},
        steps={name: setups[name].steps for name in SETUPS},
    )
    write_report(report, opts.out_dir)

    limit = None if opts.memory_limit_gib is None else int(opts.memory_limit_gib * GIB)
    for name in SETUPS:
        setup = setups[name]
        previous: List = []

        def probe(bins, setup=setup, previous=previous):
            batches = setup.heaviest_batches(bins)
            ids = [u for u, _ in batches]
            grew = not previous or ids != previous[-1]
            previous.append(ids)
            peaks = []
            for utt_ids, batch in batches:
                fits, peak, note = setup.try_batch(utt_ids, batch, limit)
                if not fits:
                    return False, grew, note
                peaks.append(peak)
            top = f", peak {max(peaks) / GIB:.1f} GiB" if peaks and peaks[0] is not None else ""
            return True, grew, f"{len(batches)} heaviest batches fit (largest {max(len(u) for u in ids)} utts{top})"

        res = doubling_search(setup.args.batch_bins, probe, opts.search_doublings,
                              out_of_time=lambda: time.perf_counter() > deadline)
        if res["largest_fitting"] is not None:
            res["largest_fitting_sec"] = batch_bins_seconds(name, res["largest_fitting"], confs[name], setup.fs_hz)
        report["batch_bins_search"][name] = res
        write_report(report, opts.out_dir)
    report["meta"]["total_sec"] = time.perf_counter() - t_start
    write_report(report, opts.out_dir)
    print(markdown(report))
    return report


def write_report(report: Dict, out_dir: Path) -> None:
    (out_dir / "gpu_benchmark.json").write_text(json.dumps(report, indent=1, default=float))
    (out_dir / "gpu_benchmark.md").write_text(markdown(report))


if __name__ == "__main__":
    main()
