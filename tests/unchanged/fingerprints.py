"""Fingerprints of what a user sees, for comparing two versions of the package.

``python tests/unchanged/fingerprints.py {plans,features,steps,audits,restat} [...] --repo REPO`` prints one JSON
object, keyed by kind, for the ``espnet_dynres`` package found first on ``PYTHONPATH`` (a checkout of any
commit), using the configs under ``REPO/conf``:

* ``plans``: for every ``batch_type: dynres`` config and two corpora (connected-digit-like
  durations, and 5 s clips beside minutes-long calls), the sampler's batches, frames per
  utterance and batch kinds of epochs 1-5 (training, and with ``min_batch_size`` 2 as under
  DDP), and the validation sampler's batches;
* ``features``: the ``dynres`` frontend's features, lengths and rates (training step with and
  without a plan, evaluation, ``eval_frame_rate_hz``, ``method: resample``) as SHA-256 of their
  bytes, and ``specaug: dynres``'s output under a fixed seed;
* ``audits``: the batch audit CLI's JSON summary and dumped batches (:func:`audits`);
* ``steps``: the main config's model trained for a few steps on a fixed synthetic batch
  sequence: each step's loss, CTC and attention losses, weight and gradient norm, as ``repr``
  of the float (bit-exact);
* ``restat``: the BatchNorm statistics re-estimated after a few such steps, as before a
  validation (:func:`restat`).

Only public entry points of the package are used, found by their current or former module path.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

import numpy as np
import yaml

FS_HZ = 16000


def _first_attr(name: str, *modules: str):
    """``name`` from the first of ``modules`` that imports (the package's layout may have changed)."""
    errors = []
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            errors.append(f"{module}: {e}")
    raise ImportError(f"{name} not found: {'; '.join(errors)}")


def frontend_class():
    return _first_attr("DynResFrontend", "espnet_dynres.asr.frontend.dynres")


def sampler_class():
    return _first_attr("DynResBatchSampler", "espnet_dynres.samplers.dynres_batch_sampler")


def _epoch_view(sampler, epoch: int, policy):
    """An epoch's batches, frames per utterance, kinds, ``T`` per batch and utterances below the clamp,
    from the sampler's one accessor (``planned_batches``) or its former per-view accessors."""
    if not hasattr(sampler, "planned_batches"):
        return [sampler.batches_for_epoch(epoch), sampler.utt_frames_for_epoch(epoch),
                [str(getattr(k, "value", k)) for k in sampler.kinds_for_epoch(epoch)],
                sampler.frames_for_epoch(epoch), sampler.num_below_clamp_for_epoch(epoch)]
    planned = sampler.planned_batches(epoch)
    samples = [sampler.utt2samples[k] for b in planned for k in b.keys]
    frames = [t for b in planned for t in b.plan.frames]
    below = int(policy.below_clamp(samples, frames).sum()) if sampler.shuffle else 0
    return [[b.keys for b in planned], [b.plan.frames for b in planned], [str(b.plan.kind.value) for b in planned],
            [b.plan.num_frames for b in planned], below]


def _plan_argument(frames: List[int]) -> dict:
    """The keyword argument that hands a plan of ``frames`` to the frontend's ``features`` / the model's
    ``forward``: a ``BatchPlan`` (``batch_plan``) or, formerly, a ``(B,)`` tensor (``speech_frames``)."""
    import torch

    try:
        from espnet_dynres.core.batch_planner import BatchKind, BatchPlan
        from espnet_dynres.asr.dynres_model import DynResASRModel
    except ImportError:
        return {"speech_frames": torch.tensor(frames)}
    if "batch_plan" not in inspect.signature(DynResASRModel.forward).parameters:
        return {"speech_frames": torch.tensor(frames)}
    kind = BatchKind.RULE if len(set(frames)) == 1 else BatchKind.PADDED
    return {"batch_plan": BatchPlan(tuple(int(t) for t in frames), kind)}


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def corpora(out: Path) -> Dict[str, Dict[str, Path]]:
    """Two synthetic corpora as ESPnet shape files (samples at 16 kHz, tokens), and CTC minima."""
    rng = np.random.default_rng(0)
    digits = np.clip(rng.lognormal(np.log(3.0), 0.6, 3000), 0.2, 38.0)
    clips = rng.uniform(2.0, 8.0, 1800)
    calls = rng.uniform(60.0, 480.0, 200)
    longtail = rng.permutation(np.concatenate([clips, calls]))
    result = {}
    for name, secs in (("digits", digits), ("longtail", longtail)):
        d = out / name
        d.mkdir(parents=True)
        samples = (secs * FS_HZ).astype(np.int64)
        tokens = np.maximum(1, np.round(secs * 1.8)).astype(np.int64)
        keys = [f"{name}-{i:05d}" for i in range(len(secs))]
        (d / "speech_shape").write_text("".join(f"{k} {n}\n" for k, n in zip(keys, samples)))
        (d / "text_shape").write_text("".join(f"{k} {t}\n" for k, t in zip(keys, tokens)))
        min_frames = {k: int(4 * t + 7) for k, t in zip(keys, tokens)}  # any fixed CTC minimum
        result[name] = dict(shapes=[str(d / "speech_shape"), str(d / "text_shape")], min_frames=min_frames)
    return result


def dynres_configs(repo: Path) -> List[Path]:
    configs = []
    for path in sorted((repo / "conf").rglob("*.yaml")):
        conf = yaml.safe_load(path.read_text()) or {}
        if conf.get("batch_type") == "dynres":
            configs.append(path)
    return configs


def plans(repo: Path) -> Dict[str, str]:
    Frontend, Sampler = frontend_class(), sampler_class()
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = corpora(Path(tmp))
        for path in dynres_configs(repo):
            conf = yaml.safe_load(path.read_text())
            policy = Frontend(fs=FS_HZ, **(conf.get("frontend_conf") or {})).policy
            options = {k: conf[k] for k in ("shuffle_jitter", "batch_fill") if conf.get(k) is not None}
            for corpus, c in data.items():
                name = f"{path.relative_to(repo)}:{corpus}"
                for min_bs in (1, 2):
                    sampler = Sampler(
                        batch_bins=int(conf["batch_bins"]), shape_files=c["shapes"], policy=policy,
                        min_batch_size=min_bs, max_batch_size=conf.get("max_batch_size"),
                        utt2min_frames=c["min_frames"], seed=int(conf.get("seed", 0)), shuffle=True,
                        **options,
                    )
                    epochs = [_epoch_view(sampler, epoch, policy) for epoch in range(1, 6)]
                    result[f"{name}:train:min_batch_size={min_bs}"] = digest(epochs)
                valid = Sampler(
                    batch_bins=int(conf.get("valid_batch_bins") or conf["batch_bins"]), shape_files=c["shapes"],
                    policy=policy, shuffle=False, max_batch_size=conf.get("max_batch_size"),
                )
                result[f"{name}:valid"] = digest(_epoch_view(valid, 1, policy)[:3])
    return result


def _speech(seed: int, lengths: List[int]):
    import torch

    g = torch.Generator().manual_seed(seed)
    speech = torch.zeros(len(lengths), max(lengths))
    t = torch.arange(max(lengths)) / FS_HZ
    for b, n in enumerate(lengths):
        tone = torch.sin(2 * np.pi * (200 + 150 * b) * t[:n])
        speech[b, :n] = 0.3 * tone + 0.05 * torch.randn(n, generator=g)
    return speech, torch.tensor(lengths, dtype=torch.long)


def _tensor_digest(x) -> str:
    return "none" if x is None else hashlib.sha256(x.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


def features(repo: Path) -> Dict[str, str]:
    import torch

    Frontend = frontend_class()
    SpecAug = _first_attr("DynResSpecAug", "espnet_dynres.asr.specaug.dynres_specaug")
    main = yaml.safe_load((repo / "conf/train_asr_conformer_dynres_cpu.yaml").read_text())
    base = dict(main["frontend_conf"], fs=FS_HZ)
    variants = {
        "main": base,
        "resample": dict(base, method="resample"),
        "resample_resampled_fbank": dict(base, method="resample", resample_filterbank="resampled"),
        "eval80": dict(base, eval_frame_rate_hz=80),
        "espnet_defaults": dict(fs=FS_HZ),
    }
    batches = {
        "common": [30000, 28000, 26500, 25000],  # one common frame count
        "spread": [80000, 16000, 4000],  # no common frame count inside the clamp
        "short": [400, 1200, 5000],
    }
    result = {}
    for vname, conf in variants.items():
        frontend = Frontend(**conf)
        for bname, lengths in batches.items():
            speech, speech_lengths = _speech(len(lengths), lengths)
            runs = {}
            frontend.train()
            out = frontend.features(speech, speech_lengths)
            runs["train_no_plan"] = out
            counts = [int(frontend.policy.frame_count_ranges([n])[0][0]) for n in lengths]  # each at its lowest count
            plan = list(_plan_argument(counts).values())[0]
            out_plan = frontend.features(speech, speech_lengths, plan)
            runs["train_planned_lowest"] = out_plan
            frontend.eval()
            runs["eval"] = frontend.features(speech, speech_lengths)
            for rname, o in runs.items():
                result[f"{vname}:{bname}:{rname}"] = "/".join(
                    [_tensor_digest(o.feats), str(o.feats_lengths.tolist()), _tensor_digest(o.frame_rates_hz),
                     str(bool(o.fallback))])
    specaug = SpecAug(**main["specaug_conf"])
    frontend = Frontend(**base).train()
    speech, speech_lengths = _speech(5, batches["common"])
    out = frontend.features(speech, speech_lengths)
    torch.manual_seed(0)
    ratios = out.frame_rates_hz / frontend.policy.standard_frame_rate_hz
    aug, aug_lengths = specaug(out.feats, out.feats_lengths, frame_rate_ratios=ratios)
    result["specaug:main"] = _tensor_digest(aug) + "/" + str(aug_lengths.tolist())
    return result


def _main_model(repo: Path, tmp: str, extra_args: List[str] = ()):
    """The main config's model as ``asr_train`` builds it, and the task arguments."""
    import torch
    import espnet_dynres  # noqa: F401  (registers the plugin)
    from espnet2.tasks.asr import ASRTask

    tokens = Path(tmp) / "tokens.txt"
    tokens.write_text("\n".join(["<blank>", "<unk>"] + [f"w{i}" for i in range(10)] + ["<sos/eos>"]) + "\n")
    parser = ASRTask.get_parser()
    args = parser.parse_args([
        "--config", str(repo / "conf/train_asr_conformer_dynres_cpu.yaml"), "--token_list", str(tokens),
        "--token_type", "word", "--frontend_conf", f"fs={FS_HZ}", "--output_dir", str(Path(tmp) / "exp"),
        "--train_shape_file", "x", "--valid_shape_file", "x", "--normalize", "none", *extra_args,
    ])
    torch.manual_seed(0)
    np.random.seed(0)
    return ASRTask.build_model(args), args


def _train_steps(model, num_steps: int) -> Dict[str, List[str]]:
    """``num_steps`` Adam steps with ESPnet's gradient clipping, on planned batches of synthetic audio
    (a common frame count where one exists, else each utterance at its lowest, as the sampler plans a
    padded batch); each step's loss, CTC and attention losses, weight and gradient norm."""
    import torch

    model.train()
    optim = torch.optim.Adam(model.parameters(), lr=0.002)
    rng = np.random.default_rng(1)
    out = {"loss": [], "loss_ctc": [], "loss_att": [], "weight": [], "grad_norm": []}
    policy = model.frontend.policy
    for step in range(num_steps):
        lengths = sorted(rng.integers(8000, 40000, size=3).tolist(), reverse=True)
        speech, speech_lengths = _speech(100 + step, lengths)
        lo = max(int(policy.frame_count_ranges([n])[0][0]) for n in lengths)
        hi = min(int(policy.frame_count_ranges([n])[1][0]) for n in lengths)
        t = policy.pick_frame_count(lo, hi, int(policy.standard_frame_counts(lengths).sum()), len(lengths))
        plan = _plan_argument([t] * len(lengths) if t is not None else
                              policy.frame_count_ranges(lengths, policy.fallback_frame_rate_hz)[0].tolist())
        text_lengths = torch.tensor([int(n // 8000) + 1 for n in lengths])
        text = torch.full((len(lengths), int(text_lengths.max())), -1, dtype=torch.long)
        for b, n in enumerate(text_lengths.tolist()):
            text[b, :n] = torch.from_numpy(rng.integers(2, 12, size=n))
        torch.manual_seed(step)
        loss, stats, weight = model(speech, speech_lengths, text, text_lengths, **plan)
        optim.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        for key, value in (("loss", loss), ("loss_ctc", stats["loss_ctc"]), ("loss_att", stats["loss_att"]),
                           ("weight", weight), ("grad_norm", norm)):
            out[key].append(repr(float(value)))
    return out


def steps(repo: Path, num_steps: int = 6) -> Dict[str, List[str]]:
    """The main config's model (as ``asr_train`` builds it) for ``num_steps`` training steps
    (:func:`_train_steps`)."""
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model, _ = _main_model(repo, tmp)
    return _train_steps(model, num_steps)


def restat(repo: Path, num_steps: int = 12) -> Dict[str, str]:
    """The BatchNorm statistics the main config's model evaluates with after ``num_steps`` training
    steps (:func:`_train_steps`), re-estimated as training does before a validation: with the
    config's evaluation budget, and with ``valid_batch_bins`` 300 (a sample of part of the
    utterances, in several batches).  SHA-256 of each layer's running mean and variance."""
    import torch

    torch.set_num_threads(1)
    result = {}
    for name, extra in (("main", []), ("valid_batch_bins=300", ["--valid_batch_bins", "300"])):
        with tempfile.TemporaryDirectory() as tmp:
            model, args = _main_model(repo, tmp, extra)
            try:  # the re-estimate as a trainer step
                from espnet_dynres.glue.trainer import DynResTrainer
            except ImportError:  # the re-estimate inside model.eval()
                _train_steps(model, num_steps)
                model.eval()
            else:
                reestimate = DynResTrainer.build_options(args).batchnorm_reestimate
                with reestimate.collecting(model):
                    _train_steps(model, num_steps)
                model.eval()
                reestimate.run(model)
        for key, layer in model.named_modules():
            if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm):
                result[f"{name}:{key}"] = "/".join(
                    _tensor_digest(t) for t in (layer.running_mean, layer.running_var, layer.num_batches_tracked))
    return result


def _rounded(obj):
    """Floats to 12 significant digits: the audit sums audio in samples before dividing by ``fs``,
    so a figure may move in its last bits between versions and nowhere else."""
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return float(f"{obj:.12g}") if isinstance(obj, float) else obj


def audits(repo: Path) -> Dict[str, str]:
    """The audit CLI's JSON summary (``python -m espnet_dynres.bin.audit_batches --json``, build time
    left out, floats as :func:`_rounded`) and the batches it dumps (``--dump_batches``): every
    ``batch_type: dynres`` config on the digit corpus, the main, ``numel`` and long-tail configs on
    both corpora, and the main config with ``--match`` the ``numel`` config."""
    import contextlib
    import io

    from espnet_dynres.bin.audit_batches import main as audit_main

    numel = repo / "conf/train_asr_conformer_numel_cpu.yaml"
    main_config = repo / "conf/train_asr_conformer_dynres_cpu.yaml"
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = corpora(Path(tmp))
        for path in dynres_configs(repo) + [numel]:
            both = path in (main_config, numel) or "longtail" in str(path)
            for corpus, c in (data.items() if both else [("digits", data["digits"])]):
                runs = {"": []}
                if path == main_config:
                    runs[":match"] = ["--match", str(numel)]
                for suffix, extra in runs.items():
                    out, dump = Path(tmp) / "audit.json", Path(tmp) / "batches.json"
                    argv = ["--config", str(path), "--speech_shape", c["shapes"][0], "--text_shape", c["shapes"][1],
                            "--fs", str(FS_HZ), "--json", str(out), "--dump_batches", str(dump)] + extra
                    with contextlib.redirect_stdout(io.StringIO()):
                        assert audit_main(argv) == 0
                    summary = json.loads(out.read_text())
                    summary.pop("build_time_sec")
                    name = f"{path.relative_to(repo)}:{corpus}{suffix}"
                    result[name] = digest(_rounded(summary))
                    result[f"{name}:batches"] = digest(json.loads(dump.read_text()))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    kinds = {"plans": plans, "features": features, "steps": steps, "audits": audits, "restat": restat}
    parser.add_argument("what", nargs="+", choices=sorted(kinds), help="one JSON object per kind, keyed by it")
    parser.add_argument("--repo", type=Path, required=True, help="the checkout whose conf/ is used")
    args = parser.parse_args(argv)
    result = {what: kinds[what](args.repo) for what in args.what}
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
