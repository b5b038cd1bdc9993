"""``python -m espnet_dynres.bin.convert_config``: a user's ESPnet training config, switched to the plugin::

    python -m espnet_dynres.bin.convert_config --config conf/train_asr.yaml \\
        --stats_dir exp/asr_stats_raw_en_bpe5000 [--out conf/train_asr_dynres.yaml]

Rewrites a ``numel``, ``length`` or ``folded`` config with ``batch_type: dynres`` and the batch audit's ``--match``
``batch_bins`` (its mean audio per step; no batch larger in ``B × T`` than its largest), ``frontend: dynres``,
``specaug: dynres``, ``model: token_normalized``, ``grad_clip: 1``, no ``valid_batch_bins``, printing each reason;
refuses another ``batch_type``, frontend or model, ``input_size`` or a stats dir without shape files, naming the key."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

import yaml

from espnet_dynres import batch_audit
from espnet_dynres.batch_audit import config_sampler_options, read_shape_table
from espnet_dynres.core.frame_rate_policy import DEFAULT_CLAMP_RATIOS, parse_fs
from espnet_dynres.core.frontend_config import FrontendConfig
from espnet_dynres.glue.config_checks import TOKEN_NORMALIZED_MAX_GRAD_CLIP
from espnet_dynres.glue.ctc_targets import config_min_frames

CONVERTIBLE_BATCH_TYPES = ("numel", "length", "folded")


def _number(x: float):
    return int(round(x)) if abs(x - round(x)) < 1e-9 else round(x, 3)


def find_shape_files(stats_dir: Path) -> Tuple[Path, Optional[Path]]:
    """``<stats_dir>/train/speech_shape`` and its ``text_shape.<token_type>`` (or ``text_shape``), if any.
    Raises:
        SystemExit: no ``speech_shape`` (run collect-stats, asr.sh stage 10, first)."""
    train = stats_dir / "train"
    speech = train / "speech_shape"
    if not speech.is_file():
        raise SystemExit(f"convert_config: {speech} not found; give the collect-stats directory of your training data "
                         "(asr.sh stage 10 writes <expdir>/asr_stats_*/train/speech_shape)")
    texts = sorted(train.glob("text_shape.*")) or sorted(train.glob("text_shape"))
    return speech, (texts[0] if texts else None)


def convert(conf: Dict, stats_dir: Path, fs: Optional[str] = None,
            token_options: Optional[Mapping] = None) -> Tuple[Dict, List[str]]:
    """``(new_conf, notes)``: the dynres config for ``conf`` (new dict, key order kept) and one line per change.
    Raises:
        SystemExit: a config the plugin cannot take (module docstring), naming the key."""
    batch_type = conf.get("batch_type", "folded")  # ESPnet's default
    if batch_type not in CONVERTIBLE_BATCH_TYPES:
        raise SystemExit(f"convert_config: batch_type: {batch_type} cannot be converted; give a config with batch_type "
                         f"{', '.join(CONVERTIBLE_BATCH_TYPES)} (a dynres config needs no conversion)")
    if conf.get("input_size") is not None:
        raise SystemExit("convert_config: input_size is set (extracted features); the dynres switches need raw audio "
                         "(asr.sh --feats_type raw). model: token_normalized alone works on features.")
    frontend = conf.get("frontend", "default")
    if frontend != "default":
        raise SystemExit(
            f"convert_config: frontend: {frontend} cannot be converted; frontend: dynres replaces ESPnet's "
            "default (log-mel) frontend only")
    model = conf.get("model", "espnet")
    if model != "espnet":
        raise SystemExit(f"convert_config: model: {model} cannot be converted; model: token_normalized is ESPnet's "
                         "default model (model: espnet) with a per-token loss")
    speech_shape, text_shape = find_shape_files(stats_dir)
    notes: List[str] = []
    out = dict(conf)
    frontend_conf = dict(conf.get("frontend_conf") or {})
    if fs is not None:
        frontend_conf.setdefault("fs", fs)
    standard = FrontendConfig.from_conf(frontend_conf).policy.standard_frame_rate_hz
    for key in ("min_frame_rate_hz", "max_frame_rate_hz"):  # the policy's default clamp, written out
        frontend_conf.setdefault(key, _number(DEFAULT_CLAMP_RATIOS[key] * standard))
    out["frontend"] = "dynres"
    out["frontend_conf"] = frontend_conf
    notes.append(f"frontend: default -> dynres (your frontend_conf kept; standard rate {standard:g} Hz, clamp "
                 f"{frontend_conf['min_frame_rate_hz']:g}-{frontend_conf['max_frame_rate_hz']:g} Hz): every utterance "
                 "of a training batch gets the batch's frame count, so no frame is padding; evaluation stays at the "
                 "standard rate")
    if conf.get("specaug") == "specaug":
        out["specaug"] = "dynres"
        notes.append("specaug: specaug -> dynres (your specaug_conf kept): time masks and warps in seconds at every "
                     "frame rate")
    out["model"] = "token_normalized"
    notes.append("model: espnet -> token_normalized (your model_conf kept): CTC and attention losses divided by the "
                 "batch's target tokens, which ESPnet's trainer averages globally across GPUs")
    old_clip = conf.get("grad_clip", 5.0)  # ESPnet's default
    out["grad_clip"] = _number(TOKEN_NORMALIZED_MAX_GRAD_CLIP)
    notes.append(f"grad_clip: {old_clip} -> {out['grad_clip']:g}: the per-token loss's gradients are about "
                 "B / N of ESPnet's (docs/training_dynamics.md)")
    if conf.get("valid_batch_bins") is not None and conf.get("valid_batch_type") in (None, *CONVERTIBLE_BATCH_TYPES):
        out.pop("valid_batch_bins")
        notes.append(f"valid_batch_bins: {conf['valid_batch_bins']} removed: it counted {batch_type} bins; validation "
                     "now shares batch_bins (feature frames)")
    draft = dict(out, batch_type="dynres")  # batch_bins: the batch audit's match on the training shape files
    policy = FrontendConfig.from_conf({**frontend_conf, **({"fs": parse_fs(fs)} if fs else {})}).policy
    utt2min_frames, _ = config_min_frames(draft, **(token_options or {}))
    options = {k: v for k, v in config_sampler_options(draft).items()
               if k not in ("batch_type", "batch_bins", "fold_length", "oversized")}
    match = batch_audit.match(conf, read_shape_table(speech_shape, text_shape), speech_shape, text_shape, policy=policy,
                              fs_hz=parse_fs(fs) if fs else None, utt2min_frames=utt2min_frames, **options)
    out["batch_type"] = "dynres"
    out["batch_bins"] = int(match["batch_bins"])
    ref, chosen = match["reference_figures"], match["figures"]["batch_bins"]
    same = (
        f"your mean audio per step is not reachable: the frame-rate clamp closes every batch before it "
        f"(durations too far apart to share a frame count), so {match['batch_bins_mean_matched']} gives the fullest "
        f"batches it allows" if match.get("reference_mean_unreachable")
        else f"the same mean audio per step as yours: {match['batch_bins_mean_matched']}")
    notes.append(
        f"batch_type: {batch_type} -> dynres, batch_bins: {conf.get('batch_bins', '(default)')} ({batch_type} bins) -> "
        f"{out['batch_bins']} (feature frames B x T). On {speech_shape}: your config plans {ref['mean_audio_sec']:.1f} s "
        f"of audio per step on average (largest batch {ref['max_frames']:.0f} frames); this one "
        f"{chosen['mean_audio_sec']:.1f} s (largest {chosen['max_frames']:.0f} frames). {same[0].upper() + same[1:]}; "
        f"largest batch no larger than yours: up to {match['batch_bins_memory_safe']}")
    return out, notes


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="your ESPnet training config (numel, length or folded)")
    p.add_argument("--stats_dir", type=Path, required=True,
                   help="the collect-stats directory of your training data (holds train/speech_shape)")
    p.add_argument("--out", type=Path, default=None, help="where to write the dynres config (default: "
                   "<config>_dynres.yaml beside it)")
    p.add_argument("--fs", default=None, help="sampling rate, if your frontend_conf does not give it (asr.sh passes "
                   "--frontend_conf fs=16k on the command line; default 16k)")
    c = p.add_argument_group("training's CTC minimum in the planned batches (optional; as the batch audit's options)")
    c.add_argument("--text", default=None, help="training transcripts ('utt_id text', e.g. dump/raw/train/text)")
    c.add_argument("--token_list", default=None, help="training's token list (tokens.txt)")
    c.add_argument("--token_type", default=None, help="bpe, char, word, ... (default: your config's, else bpe)")
    c.add_argument("--bpemodel", default=None, help="sentencepiece model (default: your config's)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    if not args.config.is_file():
        raise SystemExit(f"convert_config: --config {args.config}: no such file")
    conf = yaml.safe_load(args.config.read_text(encoding="utf-8")) or {}
    token_options = {key: getattr(args, key) for key in ("text", "token_list", "token_type", "bpemodel")}
    out, notes = convert(conf, args.stats_dir, args.fs, token_options)
    target = args.out or args.config.with_name(args.config.stem + "_dynres.yaml")
    header = (f"# Converted from {args.config.name} by python -m espnet_dynres.bin.convert_config "
              f"(batch_bins from the batch audit on {args.stats_dir}/train).\n")
    target.write_text(header + yaml.safe_dump(out, sort_keys=False), encoding="utf-8")
    print("\n".join(f"* {n}" for n in notes))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
