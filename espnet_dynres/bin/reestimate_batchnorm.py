"""``python -m espnet_dynres.bin.reestimate_batchnorm``: a trained model's BatchNorm statistics
re-estimated offline, optionally for another evaluation frame rate.

Reads an experiment's ``config.yaml`` and a model file (default ``valid.acc.ave.pth``), sets
``frontend_conf.eval_frame_rate_hz`` when ``--eval_frame_rate_hz`` is given (``frontend:
dynres`` only; the rate must lie in the run's clamp), re-estimates every BatchNorm layer's
running statistics over a budgeted sample of the training data at that evaluation rate
(:func:`restat_from_data_dir`: ``--restat_batches`` of the
run's evaluation budgets, the same re-estimate ``model: dynres`` runs before each evaluation),
and writes a new experiment directory holding the changed ``config.yaml`` and the model file
under its own name.  The recipe's stage 12 decodes it like any experiment
(``./run.sh --stage 12 --stop_stage 13 --asr_tag <name of --out_dir without asr_>``).

Why: BatchNorm statistics belong to the frame rate they were measured at; a model decoded at
another rate than it was validated at needs them taken again at that rate
(``docs/frontend.md``, "The math": outside a training step).  A model averaged over checkpoints
(``valid.acc.ave.pth``) also gets statistics measured with its own averaged weights.

Run it from the directory the training ran in (the config's relative paths start there)::

    python -m espnet_dynres.bin.reestimate_batchnorm --exp_dir exp/asr_x --train_dir dump/raw/train \\
        --out_dir exp/asr_x_eval80 --eval_frame_rate_hz 80
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import List, Optional

import torch
import yaml
from espnet2.tasks.asr import ASRTask

from espnet_dynres.asr.batchnorm_reestimate import reestimate_batchnorm
from espnet_dynres.asr.batchnorm_sample import BatchNormSample, RestatBudget
from espnet_dynres.core.readers import read_keyed_file
from espnet_dynres.glue.trainer import restat_budget


def restat_from_data_dir(model: torch.nn.Module, budget: RestatBudget, data_dir, num_batches: int,
                         seed: int = 0) -> int:
    """Re-estimate a trained ``model``'s BatchNorm statistics offline, as the plugin's models do
    before each evaluation, over a sample of a Kaldi-style data directory.

    The sample is :class:`BatchNormSample` ``(num_batches, seed)`` over every utterance of
    ``data_dir/wav.scp`` (raw audio, read with ``soundfile`` as float32 ``(T_samples,)`` or
    ``(T_samples, C)``, at the sampling rate the model was trained at), or of
    ``data_dir/feats.scp`` when there is no ``wav.scp`` (extracted features ``(T_frames, D)``, read
    with ``kaldiio``), offered one utterance at a time in an order shuffled with ``seed``; only the
    budgeted sample stays in memory, on the host; each batch is moved to the model's device for its
    own forward.  It is encoded by :func:`reestimate_batchnorm`, the function training calls before
    each validation (evaluation mode: the evaluation frame rate of a ``frontend: dynres``, no
    dropout, no SpecAugment), one utterance per batch.

    Args:
        model: an ESPnet ASR model with ``encode(speech, speech_lengths)``.
        budget: the run's evaluation budget (:func:`espnet_dynres.glue.trainer.restat_budget`).
        data_dir: the training data directory (``wav.scp`` or ``feats.scp``).
        num_batches: the sample's size in evaluation budgets (``batchnorm_restat_batches``).
        seed: seed of the order and of the sample's keys.

    Returns:
        The number of BatchNorm layers re-estimated.

    Raises:
        ValueError: neither ``wav.scp`` nor ``feats.scp`` in ``data_dir``; a blank line, a repeated
            utterance or an utterance without a path; a file that cannot be read (each names the
            file, the utterance and the fix).
    """
    data_dir = Path(data_dir)
    scp = data_dir / "wav.scp"
    if not scp.exists():
        scp = data_dir / "feats.scp"
    if not scp.exists():
        raise ValueError(f"{data_dir} holds neither wav.scp nor feats.scp; give the training data directory "
                         "of the run (e.g. dump/raw/train)")
    if scp.name == "wav.scp":
        import soundfile

        def load(path: str):
            return soundfile.read(path, dtype="float32")[0]  # (T_samples,) or (T_samples, C)
    else:
        import kaldiio

        def load(path: str):
            return kaldiio.load_mat(path).astype("float32")  # (T_frames, D)

    entries = list(read_keyed_file(scp).items())
    random.Random(seed).shuffle(entries)
    sample = BatchNormSample(num_batches, seed=seed)
    for utt, path in entries:
        if not path:
            raise ValueError(f"{scp}: utterance {utt} has no path; fix or remove that line")
        try:
            data = torch.from_numpy(load(path))
        except Exception as exc:  # soundfile/kaldiio raise their own types
            raise ValueError(f"{scp}: cannot read utterance {utt} from {path} ({exc}); fix the path or the file") from exc
        sample.add(data[None], torch.tensor([data.shape[0]]), budget)
    return reestimate_batchnorm(model, sample, RestatBudget(max_batch_size=1))


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m espnet_dynres.bin.reestimate_batchnorm",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exp_dir", type=Path, required=True, help="the trained experiment (config.yaml in it)")
    p.add_argument("--model_file", default="valid.acc.ave.pth", help="model file in --exp_dir")
    p.add_argument("--train_dir", type=Path, required=True,
                   help="training data directory with wav.scp (raw audio) or feats.scp (extracted features)")
    p.add_argument("--out_dir", type=Path, required=True, help="new experiment directory to write")
    p.add_argument("--eval_frame_rate_hz", type=float, default=None,
                   help="evaluation frame rate to set in frontend_conf (frontend: dynres); default: keep the run's")
    p.add_argument("--restat_batches", type=int, default=None,
                   help="sample size in evaluation budgets (default: the run's model_conf.batchnorm_restat_batches, "
                        "else 6)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    config_file = args.exp_dir / "config.yaml"
    model_file = args.exp_dir / args.model_file
    for path in (config_file, model_file):
        if not path.is_file():
            raise SystemExit(f"reestimate_batchnorm: {path} does not exist; give the experiment directory of a "
                             "finished training (--exp_dir) and one of its model files (--model_file)")
    if args.out_dir.resolve() == args.exp_dir.resolve():
        raise SystemExit("reestimate_batchnorm: --out_dir must differ from --exp_dir (the trained model is kept)")
    config = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    if args.eval_frame_rate_hz is not None:
        if config.get("frontend") != "dynres":
            raise SystemExit(f"reestimate_batchnorm: --eval_frame_rate_hz needs frontend: dynres; {config_file} has "
                             f"frontend: {config.get('frontend')}")
        config["frontend_conf"] = {**(config.get("frontend_conf") or {}), "eval_frame_rate_hz": args.eval_frame_rate_hz}
    restat_batches = args.restat_batches
    if restat_batches is None:
        restat_batches = int((config.get("model_conf") or {}).get("batchnorm_restat_batches", 6))


    args.out_dir.mkdir(parents=True, exist_ok=True)
    out_config = args.out_dir / "config.yaml"
    out_config.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    try:  # FrameRatePolicy refuses a rate outside the clamp, naming the key
        model, train_args = ASRTask.build_model_from_file(out_config, model_file, "cpu")
    except ValueError as exc:
        out_config.unlink()
        raise SystemExit(f"reestimate_batchnorm: {exc}") from None
    layers = restat_from_data_dir(model, restat_budget(train_args, model), args.train_dir, restat_batches, args.seed)
    torch.save(model.state_dict(), args.out_dir / Path(args.model_file).name)
    rate = config.get("frontend_conf", {}).get("eval_frame_rate_hz") if config.get("frontend") == "dynres" else None
    print(f"reestimate_batchnorm: {layers} BatchNorm layers re-estimated over {restat_batches} evaluation budgets of "
          f"{args.train_dir} at {'the standard rate' if rate is None else f'{rate:g} Hz'}; wrote {out_config} and "
          f"{args.out_dir / Path(args.model_file).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
