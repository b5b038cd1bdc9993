#!/usr/bin/env python3
"""Duration and token histograms of a recipe corpus, and its summary as a Markdown table.

Reads ``<data_dir>/<set>/utt2dur`` (seconds) and ``<data_dir>/<set>/text`` (words) of every set
and writes one PNG with two panels per corpus: utterances per duration bin (log-spaced bins) and
per token-count bin, one line per set. Prints one Markdown row per set: utterances, hours, and the
minimum, 5th percentile, median, 95th percentile and maximum duration and token count, and the
share of utterances above 60 s.

Usage (from egs2/fsdd_digits/asr1)::

    python local/plot_corpus.py --data_dir data_longtail --out figures/longtail_corpus.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def read_set(set_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(durations_sec, tokens)``, each ``(N,)``, in the order of ``utt2dur``.

    Raises:
        FileNotFoundError: ``utt2dur`` or ``text`` is missing (run stage 1 first).
        ValueError: an utterance of ``utt2dur`` has no transcript.
    """
    for name in ("utt2dur", "text"):
        if not (set_dir / name).is_file():
            raise FileNotFoundError(f"{set_dir / name} is missing: run the recipe's stage 1 first")
    dur = dict(line.split()[:2] for line in (set_dir / "utt2dur").read_text().splitlines() if line.strip())
    words = {}
    for line in (set_dir / "text").read_text().splitlines():
        utt, _, transcript = line.partition(" ")
        words[utt] = len(transcript.split())
    missing = sorted(set(dur) - set(words))
    if missing:
        raise ValueError(f"{set_dir}: utterance {missing[0]} has a duration but no transcript in text")
    return np.array([float(dur[u]) for u in dur]), np.array([words[u] for u in dur])


def summary_rows(sets: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[str]:
    head = "|set|utterances|hours|duration (s): min / 5 % / median / 95 % / max|tokens: min / median / max|above 60 s|"
    rows = [head, "|---|---|---|---|---|---|"]
    for name, (dur, tok) in sets.items():
        q = np.percentile(dur, [0, 5, 50, 95, 100])
        rows.append(
            f"|{name}|{len(dur)}|{dur.sum() / 3600:.2f}|{' / '.join(f'{x:.1f}' for x in q)}|"
            f"{tok.min()} / {int(np.median(tok))} / {tok.max()}|{100 * np.mean(dur > 60):.1f} %|"
        )
    return rows


def plot(sets: dict[str, tuple[np.ndarray, np.ndarray]], out: Path, title: str) -> None:
    all_dur = np.concatenate([d for d, _ in sets.values()])
    all_tok = np.concatenate([t for _, t in sets.values()])
    dur_bins = np.geomspace(max(all_dur.min() * 0.9, 0.05), all_dur.max() * 1.1, 25)
    tok_bins = np.geomspace(max(all_tok.min(), 1) * 0.9, all_tok.max() * 1.1, 25)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, (dur, tok) in sets.items():
        axes[0].hist(dur, bins=dur_bins, histtype="step", linewidth=1.5, density=True, label=f"{name} ({len(dur)})")
        axes[1].hist(tok, bins=tok_bins, histtype="step", linewidth=1.5, density=True, label=name)
    axes[0].set(xscale="log", xlabel="duration (s, log scale)", ylabel="density", title="utterance duration")
    axes[1].set(xscale="log", xlabel="target tokens per utterance (log scale)", title="tokens per utterance")
    axes[0].axvline(60, color="grey", linestyle=":", linewidth=1)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data_dir", type=Path, required=True, help="the recipe's --datadir (stage 1 done)")
    p.add_argument("--sets", nargs="+", default=["train", "dev", "test"])
    p.add_argument("--out", type=Path, required=True, help="PNG to write")
    p.add_argument("--title", default=None, help="figure title (default: the data dir's name)")
    args = p.parse_args(argv)
    try:
        sets = {name: read_set(args.data_dir / name) for name in args.sets}
    except (FileNotFoundError, ValueError) as exc:
        sys.exit(f"plot_corpus.py: error: {exc}")
    plot(sets, args.out, args.title or args.data_dir.name)
    print("\n".join(summary_rows(sets)))
    print(f"\nWrote {args.out}")


if __name__ == "__main__":
    main()
