#!/usr/bin/env python3
"""Figure and statistics for docs/frontend.md (dynres frontend at 70, 100 and 130 Hz).

Usage: python benchmarks/frontend_figures_and_stats.py [--num_utts 200] [--out_dir docs]

1. ``docs/figures/logmel_70_100_130.png``: one real utterance (three FSDD digits)
   as log-mel at 70, 100 and 130 Hz, both methods.
2. Per-frame mean and standard deviation of log-mel (averaged over mel bands)
   over ``--num_utts`` real utterances at 70, 100 and 130 Hz for ``hop`` and
   ``resample`` (both filterbank variants), and the largest per-band deviation
   of mean and std from 100 Hz in units of the 100 Hz std.  This is what
   decides whether ``global_mvn`` statistics collected at 100 Hz stay valid.
   Printed as a Markdown table (and written to ``<out_dir>/frontend_stats.md``).
"""

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from espnet_dynres.asr.frontend.dynres import DynResFrontend  # noqa: E402
from factory import real_utterances  # noqa: E402

RATES_HZ = (70.0, 100.0, 130.0)
RECIPE_16K = dict(n_fft=512, win_length=400, hop_length=160)  # the recipe's 25 ms / 10 ms analysis


def feats_at_rate(fe: DynResFrontend, wav: torch.Tensor, rate_hz: float) -> torch.Tensor:
    """``(T_frames, n_mels)`` log-mel of one utterance at (about) ``rate_hz``."""
    n = len(wav)
    t = 1 + int(n * rate_hz / fe.fs)
    lengths = torch.tensor([n])
    if fe.method == "hop":
        out, _ = fe.hop_logmel(wav[None], lengths, torch.tensor([t]))
    else:
        out, _ = fe.resample_logmel(wav[None], lengths, torch.tensor([t]))
    return out[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num_utts", type=int, default=200)
    ap.add_argument("--out_dir", type=Path, default=REPO / "docs")
    args = ap.parse_args()

    variants = {
        "hop": DynResFrontend(method="hop", **RECIPE_16K),
        "resample (filterbank of fs: speed change)": DynResFrontend(method="resample", **RECIPE_16K),
        "resample (filterbank of fs')": DynResFrontend(method="resample", resample_filterbank="resampled", **RECIPE_16K),
    }
    wav = real_utterances(1, concat=3, start=1234)[0]
    fig, axes = plt.subplots(len(variants), 3, figsize=(12, 7), constrained_layout=True)
    for row, (name, fe) in enumerate(variants.items()):
        for col, rate in enumerate(RATES_HZ):
            f = feats_at_rate(fe, wav, rate)
            ax = axes[row, col]
            ax.imshow(f.T.numpy(), origin="lower", aspect="auto", cmap="magma", vmin=-14, vmax=4)
            ax.set_title(f"{name}\n{rate:g} Hz: {f.shape[0]} frames", fontsize=8)
            ax.set_xlabel("frame")
            ax.set_ylabel("mel band")
    fig_path = args.out_dir / "figures" / "logmel_70_100_130.png"
    fig_path.parent.mkdir(parents=True, exist_ok=True)
    fig.suptitle(f"One utterance ({len(wav) / 16000:.2f} s, three digits) at 70, 100 and 130 Hz")
    fig.savefig(fig_path, dpi=90)
    print(f"figure: {fig_path}")

    wavs = real_utterances(args.num_utts, concat=2, start=0)
    rows = ["| method | rate (Hz) | mean | std | max abs Δmean / std₁₀₀ | max abs Δstd / std₁₀₀ |", "|---|---|---|---|---|---|"]
    for name, fe in variants.items():
        per_rate = {}
        for rate in RATES_HZ:
            frames = torch.cat([feats_at_rate(fe, w, rate) for w in wavs])  # (sum T, n_mels)
            per_rate[rate] = (frames.mean(0), frames.std(0))
        m100, s100 = per_rate[100.0]
        for rate in RATES_HZ:
            m, s = per_rate[rate]
            dm = ((m - m100).abs() / s100).max().item()
            ds = ((s - s100).abs() / s100).max().item()
            rows.append(f"| {name} | {rate:g} | {m.mean():.3f} | {s.mean():.3f} | {dm:.4f} | {ds:.4f} |")
    table = "\n".join(rows)
    print(table)
    (args.out_dir / "frontend_stats.md").write_text(
        f"<!-- written by benchmarks/frontend_figures_and_stats.py --num_utts {args.num_utts} -->\n{table}\n"
    )


if __name__ == "__main__":
    main()
