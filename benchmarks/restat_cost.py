"""Cost of the BatchNorm re-estimate against a validation pass: wall-clock and peak memory.

Each measurement runs in a fresh process (peak resident memory, ``ru_maxrss``, is a lifetime
maximum), on one thread, with the model of ``--config`` (untrained: the cost does not depend on
the weights):

* ``restat``: the re-estimate as the trainer runs it before validation, over
  the sample a training epoch keeps of ``--train_dir`` (``batchnorm_restat_batches`` validation budgets),
  in batches inside the run's evaluation budget (``valid_batch_bins``, else ``batch_bins``);
* ``restat_per_layer``: the same statistics computed with one pass of the sample per BatchNorm
  layer (``blocks=None``), the method before the block-by-block pass, for comparison;
* ``valid``: one validation pass over ``--valid_dir``: the dynres validation grouping of the same
  budget (every utterance at the standard rate, padded to the longest of its batch), each batch
  through the model's forward (encoder, CTC, decoder) in eval mode without gradients.

Reported per measurement: seconds and the peak resident memory above the process after loading
the model and the audio (MiB).  ``--long_form_dir DIR`` first writes a long-utterance data dir
(``--long_form_count`` recordings of ``--long_form_sec`` seconds: one FSDD speaker's digits
joined with 0.1-0.4 s pauses), to use as ``--train_dir`` and ``--valid_dir``.

Example (recipe data after stage 4)::

    python benchmarks/restat_cost.py --config conf/train_asr_conformer_dynres_cpu.yaml \\
        --train_dir egs2/fsdd_digits/asr1/dump/raw/train --valid_dir egs2/fsdd_digits/asr1/dump/raw/dev
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import soundfile
import torch
import yaml

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # benchmarks/common.py, also when this file is imported by path
    sys.path.insert(0, str(HERE))
from common import DEFAULT_FSDD_DIR, fsdd_recordings  # noqa: E402

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def make_long_form(out_dir: Path, fsdd_dir: Path, count: int, duration_sec: float, fs_hz: int = 16000,
                   seed: int = 0) -> Path:
    """``count`` recordings of about ``duration_sec`` s (one speaker each, digits with 0.1-0.4 s
    pauses), resampled to ``fs_hz``: ``wav.scp`` and ``text`` in ``out_dir``."""
    import torchaudio

    rng = random.Random(seed)
    files = fsdd_recordings(fsdd_dir, count=None)
    speakers = sorted({f.name.split("_")[1] for f in files})
    (out_dir / "wav").mkdir(parents=True, exist_ok=True)
    scp, text = [], []
    for i in range(count):
        speaker = speakers[i % len(speakers)]
        own = [f for f in files if f.name.split("_")[1] == speaker]
        parts, words, total = [], [], 0.0
        while total < duration_sec:
            f = rng.choice(own)
            wav, fs = soundfile.read(f, dtype="float32")
            pause = np.zeros(int(rng.uniform(0.1, 0.4) * fs), dtype=np.float32)
            parts += [wav, pause]
            words.append(DIGITS[int(f.name.split("_")[0])])
            total += (len(wav) + len(pause)) / fs
        audio = torchaudio.functional.resample(torch.from_numpy(np.concatenate(parts)), fs, fs_hz)
        utt = f"{speaker}-long{i:03d}"
        path = out_dir / "wav" / f"{utt}.wav"
        soundfile.write(path, audio.numpy(), fs_hz)
        scp.append(f"{utt} {path.resolve()}")
        text.append(f"{utt} {' '.join(words)}")
    (out_dir / "wav.scp").write_text("".join(line + "\n" for line in scp), encoding="utf-8")
    (out_dir / "text").write_text("".join(line + "\n" for line in text), encoding="utf-8")
    return out_dir


def read_dir(data_dir: Path) -> List[tuple]:
    """``(utt_id, (T_samples,) float32, transcript)`` for every line of ``wav.scp``."""
    from espnet_dynres.core.readers import read_keyed_file

    texts = read_keyed_file(data_dir / "text")
    return [(utt, torch.from_numpy(soundfile.read(path, dtype="float32")[0]), texts.get(utt, ""))
            for utt, path in read_keyed_file(data_dir / "wav.scp").items()]


def build_model(config: Path, tokens: List[str]):
    import espnet_dynres  # noqa: F401  (registers the plugin's names)
    from espnet2.tasks.asr import ASRTask

    conf = yaml.safe_load(config.read_text(encoding="utf-8"))
    args = ASRTask.get_parser().parse_args(["--token_list", "none", "--output_dir", "unused"])  # nothing is written
    for key, value in conf.items():
        setattr(args, key, value)
    args.token_list, args.input_size = tokens, None
    args.frontend_conf = {**(args.frontend_conf or {}), "fs": 16000}
    args.normalize = None  # no stats file needed; the cost is the encoder's
    return ASRTask.build_model(args), args


def measure(what: str, config: Path, train_dir: Path, valid_dir: Path) -> Dict[str, float]:
    from espnet_dynres.asr.batchnorm_reestimate import reestimate_batchnorm
    from espnet_dynres.asr.batchnorm_sample import BatchNormSample
    from espnet_dynres.glue.trainer import restat_budget
    from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler

    torch.set_num_threads(1)
    tokens = ["<blank>", "<unk>", *DIGITS, "<sos/eos>"]
    model, args = build_model(config, tokens)
    index = {t: i for i, t in enumerate(tokens)}
    if what in ("restat", "restat_per_layer"):
        utts = read_dir(train_dir)
        random.Random(0).shuffle(utts)
        sample, budget = BatchNormSample(model.batchnorm_restat_batches), restat_budget(args, model)
        for _, wav, _ in utts:
            sample.add(wav[None], torch.tensor([wav.numel()]), budget)
        kept = len(sample)
        frames = sum(len(b) * int(model.frontend.policy.standard_frame_counts([b.shape[1]])[0]) for b in sample.batches(budget))
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        # the re-estimate as the trainer runs it (block by block where blocks chain), or the same
        # statistics with one pass of the sample per layer (the method before block by block)
        reestimate_batchnorm(model, sample, budget, block_by_block=what == "restat")
        seconds = time.perf_counter() - start
    else:
        utts = read_dir(valid_dir)
        model.eval()
        lengths = {u: w.numel() for u, w, _ in utts}
        budget = getattr(args, "valid_batch_bins", None) or args.batch_bins
        with tempfile.TemporaryDirectory() as tmp:
            shape = Path(tmp) / "speech_shape"
            shape.write_text("".join(f"{u} {n}\n" for u, n in lengths.items()))
            sampler = DynResBatchSampler(batch_bins=int(budget), shape_files=[str(shape)],
                                         policy=model.frontend.policy, shuffle=False)
        by_id = {u: (w, t) for u, w, t in utts}
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        with torch.no_grad():
            for batch in [b.keys for b in sampler.planned_batches(1)]:
                wavs = [by_id[u][0] for u in batch]
                speech = torch.nn.utils.rnn.pad_sequence(wavs, batch_first=True)
                ids = [[index.get(w, 1) for w in by_id[u][1].split()] for u in batch]
                text = torch.nn.utils.rnn.pad_sequence([torch.tensor(i or [1]) for i in ids], batch_first=True,
                                                       padding_value=-1)
                model(speech, torch.tensor([w.numel() for w in wavs]), text, torch.tensor([len(i or [1]) for i in ids]))
        seconds = time.perf_counter() - start
        frames = sum(len(b) * max(f) for b, f in zip([b.keys for b in sampler.planned_batches(1)], [b.plan.frames for b in sampler.planned_batches(1)]))
        kept = len(utts)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_above_loaded_mib": (peak - base) / 1024.0, "utterances": kept,
            "input_frames": frames}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="training YAML (model, batch_bins)")
    parser.add_argument("--train_dir", type=Path, help="data dir (wav.scp, text) the re-estimate samples")
    parser.add_argument("--valid_dir", type=Path, help="data dir (wav.scp, text) of the validation pass")
    parser.add_argument("--long_form_dir", type=Path, help="write a long-utterance data dir here and use it")
    parser.add_argument("--long_form_count", type=int, default=16)
    parser.add_argument("--long_form_sec", type=float, default=120.0)
    parser.add_argument("--fsdd_dir", type=Path, default=DEFAULT_FSDD_DIR,
                        help="the FSDD recordings --long_form_dir joins (*.wav, 8 kHz)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--measure", choices=["restat", "restat_per_layer", "valid"], help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    if args.long_form_dir is not None:
        if not (args.long_form_dir / "wav.scp").exists():
            make_long_form(args.long_form_dir, args.fsdd_dir, args.long_form_count, args.long_form_sec)
        args.train_dir = args.train_dir or args.long_form_dir
        args.valid_dir = args.valid_dir or args.long_form_dir
    if args.train_dir is None or args.valid_dir is None:
        parser.error("give --train_dir and --valid_dir, or --long_form_dir")
    if args.measure:
        print(json.dumps(measure(args.measure, args.config, args.train_dir, args.valid_dir)))
        return 0
    results = {}
    for what in ("restat", "restat_per_layer", "valid"):
        cmd = [sys.executable, __file__, "--config", str(args.config), "--train_dir", str(args.train_dir),
               "--valid_dir", str(args.valid_dir), "--measure", what]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        results[what] = json.loads(out.strip().splitlines()[-1])
        r = results[what]
        print(f"{what:16s} {r['seconds']:7.1f} s  peak +{r['peak_above_loaded_mib']:7.0f} MiB  "
              f"{r['utterances']} utterances, {r['input_frames']} encoder input frames (padded)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
