"""``python -m espnet_dynres.bin.reestimate_batchnorm``: a trained model's BatchNorm statistics re-estimated offline,
optionally for another evaluation frame rate.

Sets ``frontend_conf.eval_frame_rate_hz`` (``frontend: dynres``), re-estimates BatchNorm statistics at that rate over
training data (:func:`restat_from_data_dir`) and writes config and model to a new experiment for stage 12 to decode. Run
it from the training directory::

    python -m espnet_dynres.bin.reestimate_batchnorm --exp_dir exp/asr_x --train_dir dump/raw/train \\
        --out_dir exp/asr_x_eval80 --eval_frame_rate_hz 80"""

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
    """Re-estimate ``model``'s BatchNorm statistics (:func:`reestimate_batchnorm`) over ``num_batches`` ``budget`` units
    of ``data_dir``'s ``wav.scp`` (float32 ``(T_samples,)``/``(T_samples, C)``) or ``feats.scp`` (``(T_frames, D)``);
    returns the number of layers re-estimated.
    Raises:
        ValueError: neither scp file; a blank line, repeated utterance or one without a path; an unreadable file."""
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
            raise ValueError(
                f"{scp}: cannot read utterance {utt} from {path} ({exc}); fix the path or the file") from exc
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
