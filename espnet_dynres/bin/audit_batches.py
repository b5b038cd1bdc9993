"""``python -m espnet_dynres.bin.audit_batches``: padding, batch sizes and token counts of a batch sampler.

Prints a training run's batch sizes, padding, frame rates, tokens per batch and composition change (definitions:
:mod:`espnet_dynres.batch_audit`) from ESPnet shape files; writes a PNG plot, optionally JSON. Examples::

    python -m espnet_dynres.bin.audit_batches --batch_type numel --batch_bins 320000 \\
        --speech_shape exp/asr_stats_raw_word/train/speech_shape \\
        --text_shape exp/asr_stats_raw_word/train/text_shape.word --plot numel.png
    python -m espnet_dynres.bin.audit_batches --batch_type dynres --batch_bins 7200 \\
        --fs 16000 --hop_length 160 --min_frame_rate_hz 70 --max_frame_rate_hz 130 \\
        --speech_shape exp/asr_stats_raw_word/train/speech_shape \\
        --text_shape exp/asr_stats_raw_word/train/text_shape.word --plot dynres.png
    python -m espnet_dynres.bin.audit_batches --config dynres.yaml --match numel.yaml \\
        --speech_shape exp/asr_stats_raw_word/train/speech_shape      # which batch_bins?

``--config train.yaml`` plans what training will (its sampler options, ``frontend_conf``, CTC minimum; flags win).
``--batch_bins``: samples × dims for ``numel``, samples for ``length``, feature frames ``B × T`` for ``dynres``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import yaml

from espnet_dynres.batch_audit import (
    BATCH_TYPES, OFF_STANDARD_TOLERANCE, BatchAudit, Distribution, audit_batches, build_batches,
    config_sampler_options, match, read_shape_table,
)
from espnet_dynres.core.frontend_config import FrontendConfig
from espnet_dynres.glue.ctc_targets import config_min_frames


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m espnet_dynres.bin.audit_batches", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--speech_shape", required=True, help="speech shape file: 'utt_id num_samples' per line")
    p.add_argument("--text_shape", default=None, help="text shape file ('utt_id num_tokens,vocab'): token counts")
    p.add_argument("--config", default=None, help="training YAML to take the sampler and frame-rate settings from")
    p.add_argument("--batch_type", default=None, choices=BATCH_TYPES, help="required unless --config gives it")
    p.add_argument("--batch_size", type=int, default=20, help="unsorted, sorted, folded (ESPnet's default 20)")
    p.add_argument("--batch_bins", type=int, default=None,
                   help="numel/length: ESPnet bins (default 1000000); dynres: feature frames B x T (required)")
    p.add_argument("--fold_length", type=int, action="append", default=None,
                   help="folded: one per shape file (default asr.sh's 80000 for speech, 150 for text)")
    p.add_argument("--sort_in_batch", default="descending", choices=["descending", "ascending"])  # ESPnet trainer's
    p.add_argument("--sort_batch", default="descending", choices=["descending", "ascending"])  # defaults (AbsTask)
    p.add_argument("--min_batch_size", type=int, default=1)
    g = p.add_argument_group("frames and the dynres frame-rate policy (frontend_conf)")
    g.add_argument("--fs", type=int, default=None, help="sampling rate of the shape file's samples (Hz; default 16000)")
    g.add_argument("--hop_length", type=int, default=None,
                   help="standard frame shift (samples; default 160, or the --config frontend's)")
    g.add_argument("--min_frame_rate_hz", type=float, default=None, help="default 70 Hz (or the --config frontend's)")
    g.add_argument("--max_frame_rate_hz", type=float, default=None, help="default 130 Hz (or the --config frontend's)")
    g.add_argument("--fallback_frame_rate_hz", type=float, default=None,
                   help="default 50 Hz (or the --config frontend's)")
    g.add_argument("--target_frame_rate_hz", type=float, default=None,
                   help="dynres: mean frame rate a batch aims at (default: the standard rate fs / hop_length)")
    g.add_argument("--target_frame_rate_range_hz", type=float, nargs=2, default=None, metavar=("LO", "HI"),
                   help="dynres: each batch aims at a rate drawn from [LO, HI] Hz (default: the --config frontend's)")
    g.add_argument("--max_batch_size", type=int, default=None, help="dynres: most utterances per batch")
    g.add_argument("--seed", type=int, default=0, help="dynres: seed of the per-epoch redraw")
    g.add_argument("--epoch", type=int, default=1,
                   help="dynres: the epoch to audit (1-based; its plan, e.g. under curriculum_epochs) and the next")
    g.add_argument(
        "--oversized", default="warn", choices=["warn", "error"],
        help="dynres: an utterance over batch_bins alone is warned about or refused (training's --oversized)")
    g.add_argument("--shuffle_jitter", type=float, default=0.5,
                   help="dynres: per-epoch perturbation of log-duration (training's --shuffle_jitter)")
    g.add_argument("--batch_fill", choices=["below", "nearest"], default="below",
                   help="dynres: close a batch below batch_bins or nearest to it (training's --batch_fill)")
    c = p.add_argument_group(
        "the CTC minimum (dynres): training's, from the transcripts through ESPnet's preprocessor",
        "a batch's frame count leaves every member the frames its transcript needs after the encoder's "
        "subsampling (tokens plus adjacent repeats); the defaults come from --config where it has them "
        "(an experiment's config.yaml has all of them)")
    c.add_argument("--text", default=None, help="training transcripts ('utt_id text'; default: the --config's "
                   "train_data_path_and_name_and_type entry named text)")
    c.add_argument("--token_list", default=None, help="token list (default: the --config's token_list)")
    c.add_argument("--token_type", default=None, help="bpe, char, word, ... (default: the --config's, else bpe)")
    c.add_argument("--bpemodel", default=None, help="sentencepiece model (default: the --config's)")
    c.add_argument("--cleaner", default=None, help="text cleaner (default: the --config's, else none)")
    p.add_argument("--match", default=None, metavar="REFERENCE.yaml",
                   help="dynres: compare with this reference training config (e.g. your numel config) on the same "
                        "shape files (mean and largest audio and frames per batch) and suggest a batch_bins: the one "
                        "with the reference's mean audio per step, lowered if needed so that its largest batch holds "
                        "no more B x T frames than the reference's largest (memory); both values are printed. "
                        "Without --batch_bins the audit then shows the suggested value")
    o = p.add_argument_group("output")
    o.add_argument("--plot", default=None, help="write a PNG plot here")
    o.add_argument("--dump_batches", default=None, metavar="FILE.json",
                   help="write the audited epoch's batches (utterance ids), planned T per batch and planned frames "
                        "per utterance as JSON, in the sampler's order")
    o.add_argument("--json", default=None,
                   help="write the summary as JSON here ('-' = stdout, which then holds only the JSON: the text "
                        "report and any library output go to stderr)")
    return p


def format_report(audit: BatchAudit, sampler_repr: str = "") -> str:
    """Plain-text report of an audit (what the CLI prints)."""
    def dist(d: Distribution, fmt: str = "{:.0f}") -> str:
        cells = [fmt.format(x) for x in (d.min, d.p5, d.median, d.p95, d.max)]
        return "  ".join(f"{n}={c}" for n, c in zip(("min", "5%", "median", "95%", "max"), cells)) + \
            f"  mean={d.mean:.1f}  CV={d.cv:.3f}"
    change = "n/a (no batch of 2)" if audit.composition_change is None else f"{audit.composition_change:.4f}"
    lines = [
        f"batch type            : {audit.batch_type}" + (f"  [{sampler_repr}]" if sampler_repr else ""),
        f"utterances            : {audit.num_utterances} (in batches: {audit.num_utterances_in_batches})",
        f"batches               : {audit.num_batches}",
        f"batch size            : {dist(audit.batch_size)}",
        f"padding fraction      : {audit.padding_fraction:.4f}  "
        f"({audit.padded_frames} of {audit.total_frames} feature frames)",
    ]
    if audit.batch_type == "dynres":
        lines.append(f"padded batches        : {audit.num_padded_batches} "
                     "(each member at its lowest planned rate, padded to the longest)")
    if audit.num_below_clamp is not None:
        lines.append(f"below_clamp           : {audit.num_below_clamp} of {audit.num_utterances_in_batches} utterances "
                     "(planned under min_frame_rate_hz: batch_bins too small for them at the clamp's lowest rate)")
    lines.append(f"frame rate (Hz)       : {dist(audit.frame_rate_hz, '{:.1f}')}  "
                 f"({100 * audit.off_standard_rate_fraction:.1f} % of utterances more than "
                 f"{100 * OFF_STANDARD_TOLERANCE:.0f} % from the standard rate)")
    if audit.frame_rate_histogram:
        widest = max(audit.frame_rate_histogram.values())
        for i, (span, n) in enumerate(audit.frame_rate_histogram.items()):
            head = "rate histogram (Hz)   : " if i == 0 else " " * 24
            share = n / max(1, audit.num_utterances_in_batches)
            lines.append(f"{head}{span:>9}  {n:7d}  {100 * share:5.1f} %  " + "#" * round(40 * n / max(1, widest)))
    lines.append("tokens per batch      : " + (dist(audit.tokens) if audit.tokens else "n/a (no --text_shape)"))
    lines.append(f"audio per batch (s)   : {dist(audit.audio_sec, '{:.1f}')}")
    lines.append(f"frames per batch      : {dist(audit.frames)}  (B x T feature frames, padding included)")
    lines.append(f"composition change    : {change}  (epoch-1 co-batched pairs apart in epoch 2)")
    lines.append(f"build time            : {audit.build_time_sec:.2f} s")
    return "\n".join(lines)


def plot_audit(audit: BatchAudit, path: str, title: Optional[str] = None, policy=None) -> None:
    """Four panels: batch sizes, padding per batch (``policy``: rate histogram), tokens, duration span per batch."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(2, 2, figsize=(11, 7.5))
    ax[0, 0].hist(audit.batch_sizes, bins=min(50, max(5, int(audit.batch_sizes.max()))), color="tab:blue")
    ax[0, 0].set(xlabel="utterances per batch", ylabel="batches", title="batch size")
    if policy is not None:
        rates = audit.utt_frame_rate_hz
        ax[0, 1].hist(rates, bins=60, color="tab:red")
        marks = [(policy.fallback_frame_rate_hz, "fallback", ":"), (policy.min_frame_rate_hz, "min", "--"),
                 (policy.standard_frame_rate_hz, "standard", "-"), (policy.max_frame_rate_hz, "max", "--")]
        for rate, name, style in marks:
            ax[0, 1].axvline(rate, color="black", ls=style, lw=0.8)
            ax[0, 1].text(rate, 0.98, f" {name} {rate:g}", rotation=90, va="top", fontsize=7,
                          transform=ax[0, 1].get_xaxis_transform())
        ax[0, 1].set(xlabel="planned frame rate (Hz)", ylabel="utterances",
                     title=f"frame rate per utterance; below the clamp: {audit.num_below_clamp}")
    else:
        pad = audit.batch_padded_frames / np.maximum(audit.batch_frames, 1)
        ax[0, 1].plot(np.arange(audit.num_batches), 100 * pad, ".", ms=3, color="tab:red")
        ax[0, 1].set(xlabel="batch (sampler order)", ylabel="padding (% of B x T frames)",
                     title=f"padding: {100 * audit.padding_fraction:.2f} % of all frames")
    if audit.batch_tokens is not None:
        ax[1, 0].hist(audit.batch_tokens, bins=50, color="tab:green")
        ax[1, 0].set(xlabel="target tokens per batch", ylabel="batches",
                     title=f"tokens per batch (CV {audit.tokens.cv:.2f})")
    else:
        ax[1, 0].text(0.5, 0.5, "no text shape file", ha="center", va="center")
        ax[1, 0].set_axis_off()
    order = np.lexsort((audit.batch_min_sec, audit.batch_max_sec))
    x = np.arange(audit.num_batches)
    lo, hi = audit.batch_min_sec[order], audit.batch_max_sec[order]
    ax[1, 1].fill_between(x, lo, hi, step="mid", color="tab:purple", alpha=0.35, lw=0)
    ax[1, 1].step(x, hi, where="mid", color="tab:purple", lw=0.8, label="longest")
    ax[1, 1].step(x, lo, where="mid", color="tab:orange", lw=0.8, label="shortest")
    ax[1, 1].legend(loc="upper left")
    ax[1, 1].set(xlabel="batch (by longest utterance)", ylabel="duration (s)", yscale="log",
                 title="shortest to longest utterance per batch")
    change = "n/a" if audit.composition_change is None else f"{audit.composition_change:.3f}"
    fig.suptitle(title or f"{audit.batch_type}: {audit.num_batches} batches, {audit.num_utterances} utterances, "
                 f"composition change epoch 1->2: {change}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


RATE_KEYS = ("fs", "hop_length", "min_frame_rate_hz", "max_frame_rate_hz", "fallback_frame_rate_hz",
             "target_frame_rate_hz", "target_frame_rate_range_hz")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Command line over ``--config`` (a training YAML) over the defaults."""
    parser = get_parser()
    first, _ = parser.parse_known_args(argv)
    parser.config_conf = {}
    if first.config:
        conf = yaml.safe_load(Path(first.config).read_text(encoding="utf-8")) or {}
        parser.set_defaults(**config_sampler_options(conf))
        parser.config_conf = conf
    args = parser.parse_args(argv)
    if args.batch_type is None:
        parser.error("--batch_type is required (or a --config that sets batch_type)")
    args.config_conf = parser.config_conf
    return args


def build_policy(args: argparse.Namespace):
    """The dynres frame-rate policy: the ``--config`` frontend's own, or one from the flags."""
    flags = {k: getattr(args, k) for k in RATE_KEYS if getattr(args, k) is not None}
    if args.config_conf.get("frontend") == "dynres":
        return FrontendConfig.from_conf({**(args.config_conf.get("frontend_conf") or {}), **flags}).policy
    return FrontendConfig.from_conf({"hop_length": 160, **flags}).policy  # no config: its defaults, the recipe's hop


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.json != "-":
        return _audit(args, sys.stdout)
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # the report and any library output (ESPnet's imports) to stderr
        return _audit(args, stdout)


def _audit(args: argparse.Namespace, stdout) -> int:
    policy = None
    batch_bins = args.batch_bins
    conf = args.config_conf
    if args.match and args.batch_type != "dynres":
        raise SystemExit("--match suggests a dynres batch_bins: audit --batch_type dynres (or a dynres --config)")
    if args.match and not Path(args.match).is_file():
        raise SystemExit(f"--match {args.match}: no such file; give the reference training config (YAML)")
    if args.batch_type == "dynres":
        policy = build_policy(args)
        if batch_bins is None and not args.match:
            raise SystemExit("--batch_type dynres needs --batch_bins: the frame budget B x T (feature frames), or "
                             "--match YOUR_NUMEL_CONFIG.yaml to have it suggested")
    elif batch_bins is None:
        batch_bins = 1000000  # ESPnet's default
    table = read_shape_table(args.speech_shape, args.text_shape)
    fold_lengths = args.fold_length if args.fold_length else [80000, 150]
    utt2min_frames, ctc_note = (None, None)
    if args.batch_type == "dynres":
        utt2min_frames, ctc_note = config_min_frames(conf, args.text, token_list=args.token_list,
                                                     token_type=args.token_type, bpemodel=args.bpemodel,
                                                     cleaner=args.cleaner)
    suggestion = None
    if args.match:  # the suggested values, planned with training's settings
        reference = yaml.safe_load(Path(args.match).read_text(encoding="utf-8")) or {}
        suggestion = match(reference, table, args.speech_shape, args.text_shape, policy=policy, fs_hz=args.fs,
                           batch_bins=batch_bins, epoch=args.epoch, sort_in_batch=args.sort_in_batch,
                           sort_batch=args.sort_batch, min_batch_size=args.min_batch_size,
                           max_batch_size=args.max_batch_size, seed=args.seed, utt2min_frames=utt2min_frames,
                           shuffle_jitter=args.shuffle_jitter, batch_fill=args.batch_fill)
        if batch_bins is None:
            batch_bins = suggestion["batch_bins"]
    built = build_batches(
        args.batch_type, args.speech_shape, args.text_shape, batch_size=args.batch_size, batch_bins=batch_bins,
        fold_lengths=fold_lengths, sort_in_batch=args.sort_in_batch, sort_batch=args.sort_batch,
        min_batch_size=args.min_batch_size, policy=policy, max_batch_size=args.max_batch_size, seed=args.seed,
        utt2min_frames=utt2min_frames, oversized=args.oversized, shuffle_jitter=args.shuffle_jitter,
        batch_fill=args.batch_fill, epoch=args.epoch)
    audit = audit_batches(
        table, built.epoch1, built.epoch2, hop_length_samples=policy.hop_length if policy else (
            args.hop_length or (conf.get("frontend_conf") or {}).get("hop_length") or 160),
        fs_hz=policy.fs if policy else (args.fs or 16000), plans=built.plans, batch_type=args.batch_type,
        build_time_sec=built.build_time_sec, policy=policy)
    print(format_report(audit, repr(built.sampler)))
    summary = audit.summary()
    if args.batch_type == "dynres":
        print(f"CTC minimum           : {ctc_note}")
        summary["ctc_minimum"] = ctc_note
        kinds = [b.plan.kind.value for b in built.sampler.planned_batches(args.epoch)]
        summary["batch_kinds"] = {name: kinds.count(name) for name in ("rule", "lowered", "padded")}
        print("batch kinds           : " + ", ".join(f"{k} {n}" for k, n in summary["batch_kinds"].items())
              + " (rule: the batch rule's T; lowered: T lowered to the budget; padded: no common T)")
        planner = built.sampler.planner  # the sampler's own rules
        over = sum(not planner.within_budget(b.plan.frames) for b in built.sampler.planned_batches(args.epoch))
        summary["num_over_budget_batches"] = over
        print(f"over-budget batches   : {over} (B x T above batch_bins or B above max_batch_size: oversized "
              "utterances alone, or batches forced to min_batch_size)")
    if args.dump_batches:
        Path(args.dump_batches).write_text(json.dumps({
            "epoch": args.epoch, "batches": [list(b) for b in built.epoch1],
            "frames": [p.num_frames for p in built.plans] if built.plans else None,
            "utt_frames": [list(p.frames) for p in built.plans] if built.plans else None,
        }) + "\n")
    if suggestion is not None:
        reference, figures = suggestion["reference_figures"], suggestion["figures"]
        summary["match"] = {"reference": str(args.match), **suggestion,
                            "reference_audio_per_batch_sec": reference["mean_audio_sec"]}  # backward-compatible key
        def line(f):
            return (f"audio per batch mean {f['mean_audio_sec']:.1f} s, largest {f['max_audio_sec']:.1f} s; "
                    f"frames per batch mean {f['mean_frames']:.0f}, largest {f['max_frames']:.0f}")
        print(f"match reference       : {args.match}: {line(reference)}")
        if suggestion["reference_mean_unreachable"]:
            print(f"match, same mean audio: not reachable: the frame-rate clamp closes every batch before it holds "
                  f"{reference['mean_audio_sec']:.1f} s (durations too far apart to share a frame count); the fullest "
                  f"plan it allows: batch_bins {suggestion['batch_bins_mean_matched']}: "
                  f"{line(figures['batch_bins_mean_matched'])}")
        else:
            print(f"match, same mean audio: batch_bins {suggestion['batch_bins_mean_matched']}: "
                  f"{line(figures['batch_bins_mean_matched'])} (equal work per step on average)")
        print(f"match, memory bound   : batch_bins {suggestion['batch_bins_memory_safe']}: "
              f"{line(figures['batch_bins_memory_safe'])} (the largest value whose largest batch holds no more B x T "
              "frames than the reference's largest" + ("; the clamp closes batches before any budget that large, so "
                                                       "this is the fullest batch it allows)"
                                                       if suggestion["memory_bound_never_binds"] else ")"))
        print(f"match, suggested      : batch_bins {suggestion['batch_bins']} (the smaller: the reference's mean "
              "audio per step where it fits the reference's largest batch, else the memory bound)")
    if args.plot:
        plot_audit(audit, args.plot, policy=policy)
        print(f"plot                  : {args.plot}")
    if args.json:
        text = json.dumps(summary, indent=2)
        if args.json == "-":
            print(text, file=stdout)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
