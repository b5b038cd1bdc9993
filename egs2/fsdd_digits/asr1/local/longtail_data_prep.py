#!/usr/bin/env python3
"""A long-tailed corpus: short clips beside minutes-long recordings, as in call-centre audio.

Durations follow a lognormal law (``--median_sec``, ``--sigma``), clipped to
``[--min_sec, --max_sec]``. Each set takes the law's quantiles at
``(i + 0.5) / N`` for its ``N`` utterances, so every set has the same shape
(the longest quantile of a 320-utterance set at median 20 s, sigma 0.75 is 183 s)
and the seed only decides which speaker and which recordings fill each target.

An utterance is one FSDD speaker reading digit groups (2..``--max_group``
digits, like phone or account numbers): 0.05-0.6 s pauses inside a group,
``--phrase_pause_min_sec``..``--phrase_pause_max_sec`` between groups, noise-filled
as in ``local/data_prep.py``. Groups are added until the target duration is
reached. Recordings are drawn with replacement from the speaker's takes of the
set (FSDD take split as ``local/data_prep.py``: no recording is used in two sets).

Output layout (Kaldi files, 8 kHz 16-bit wav, README with the FSDD attribution):
as ``local/data_prep.py``. Utterance ids are ``<speaker>-<set>-<index>``.
The output is byte-identical for a given ``--seed``.

Usage (from egs2/fsdd_digits/asr1; ``./run.sh --corpus longtail`` runs it as stage 1)::

    python local/longtail_data_prep.py --out_dir data_longtail
"""

from __future__ import annotations

import argparse
import statistics
from statistics import NormalDist
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data_prep  # noqa: E402  (the recipe's recordings scan, rendering and writers, reused unchanged)
from data_prep import DataPrepError, UttPlan  # noqa: E402

LONGTAIL_STREAM = 3  # random stream of this corpus (data_prep.py uses 0 for plans, 1 for noise)


def target_durations_sec(num_utts: int, median_sec: float, sigma: float, min_sec: float, max_sec: float) -> np.ndarray:
    """Lognormal quantiles at ``(i + 0.5) / num_utts``, clipped to ``[min_sec, max_sec]``; shape ``(num_utts,)``, seconds."""
    z = np.array([NormalDist().inv_cdf((i + 0.5) / num_utts) for i in range(num_utts)])
    return np.clip(median_sec * np.exp(sigma * z), min_sec, max_sec)


def plan_longtail(
    set_name: str,
    recordings: list[data_prep.Recording],
    targets_sec: np.ndarray,
    seed: int,
    max_group: int,
    phrase_pause_sec: tuple[float, float],
) -> list[UttPlan]:
    """One plan per target duration: a random speaker, digit groups until the target is reached.

    Raises:
        DataPrepError: the FSDD folder holds no recording of this set's takes.
    """
    by_speaker: dict[str, list[data_prep.Recording]] = {}
    for rec in recordings:
        if rec.take in data_prep.SET_TAKES[set_name]:
            by_speaker.setdefault(rec.speaker, []).append(rec)
    if len(targets_sec) and not by_speaker:
        raise DataPrepError(
            f"No FSDD recordings for the {set_name} set.\nFix: point --fsdd_dir at the complete FSDD recordings folder."
        )
    speakers = sorted(by_speaker)
    for pool in by_speaker.values():
        pool.sort(key=lambda r: r.name)
    rate = data_prep.SAMPLE_RATE_HZ
    gap = (round(data_prep.GAP_MIN_SEC * rate), round(data_prep.GAP_MAX_SEC * rate))
    phrase = (round(phrase_pause_sec[0] * rate), round(phrase_pause_sec[1] * rate))
    edge_max = round(data_prep.EDGE_MAX_SEC * rate)
    rng = np.random.default_rng([seed, data_prep.SET_STREAM_ID[set_name], LONGTAIL_STREAM])
    order = rng.permutation(len(targets_sec))  # which quantile goes to which index: independent of speaker
    plans = []
    for index, quantile in enumerate(order):
        speaker = speakers[int(rng.integers(len(speakers)))]
        pool = by_speaker[speaker]
        target_samples = int(targets_sec[quantile] * rate)
        edges = [int(x) for x in rng.integers(0, edge_max + 1, size=2)]
        sources: list[data_prep.Recording] = []
        pauses: list[int] = []
        total = sum(edges)
        group_left = 0  # digits still to read in the current group
        while total < target_samples:
            if sources:
                if group_left == 0:
                    pauses.append(int(rng.integers(phrase[0], phrase[1] + 1)))
                else:
                    pauses.append(int(rng.integers(gap[0], gap[1] + 1)))
                total += pauses[-1]
            if group_left == 0:
                group_left = int(rng.integers(2, max_group + 1))
            rec = pool[int(rng.integers(len(pool)))]
            sources.append(rec)
            total += rec.num_samples
            group_left -= 1
        plans.append(
            UttPlan(
                utt_id=f"{speaker}-{set_name}-{index:05d}",
                index=index,
                speaker=speaker,
                sources=tuple(sources),
                gaps_samples=(edges[0], *pauses, edges[1]),
            )
        )
    return plans


def get_parser() -> argparse.ArgumentParser:
    parser = data_prep.get_parser()
    parser.description = __doc__.split("\n\n")[0]
    parser.set_defaults(num_train=320, num_dev=60, num_test=60)
    parser.add_argument("--median_sec", type=float, default=20.0, help="median duration (s)")
    parser.add_argument("--sigma", type=float, default=0.75, help="lognormal sigma of the duration")
    parser.add_argument("--min_sec", type=float, default=3.0, help="shortest duration (s)")
    parser.add_argument("--max_sec", type=float, default=200.0, help="longest duration (s)")
    parser.add_argument("--max_group", type=int, default=5, help="most digits in one group")
    parser.add_argument("--phrase_pause_min_sec", type=float, default=0.6, help="shortest pause between groups (s)")
    parser.add_argument("--phrase_pause_max_sec", type=float, default=1.5, help="longest pause between groups (s)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = get_parser().parse_args(argv)
    if args.seed < 0:
        raise DataPrepError(f"--seed must be >= 0, got {args.seed}")
    if not 0 < args.min_sec <= args.median_sec <= args.max_sec or args.sigma <= 0:
        raise DataPrepError(
            "need 0 < --min_sec <= --median_sec <= --max_sec and --sigma > 0, got "
            f"{args.min_sec}, {args.median_sec}, {args.max_sec}, {args.sigma}"
        )
    if args.max_group < 2 or not 0 < args.phrase_pause_min_sec <= args.phrase_pause_max_sec:
        raise DataPrepError("need --max_group >= 2 and 0 < --phrase_pause_min_sec <= --phrase_pause_max_sec")
    fsdd_dir = args.fsdd_dir.resolve()
    out_dir = args.out_dir.resolve()
    audio_root = (args.audio_dir if args.audio_dir is not None else args.out_dir / "wav").resolve()
    for path in (out_dir, audio_root):
        if path == fsdd_dir or fsdd_dir in path.parents:
            raise DataPrepError(f"Refusing to write into the FSDD folder {fsdd_dir}; choose another --out_dir.")
    recordings = data_prep.scan_fsdd(fsdd_dir)
    summaries = []
    for set_name in ("train", "dev", "test"):
        count = getattr(args, f"num_{set_name}")
        if count < 0:
            raise DataPrepError(f"--num_{set_name} must be >= 0, got {count}")
        targets = target_durations_sec(count, args.median_sec, args.sigma, args.min_sec, args.max_sec)
        plans = plan_longtail(
            set_name, recordings, targets, args.seed, args.max_group,
            (args.phrase_pause_min_sec, args.phrase_pause_max_sec),
        )
        data_prep.write_set(
            set_name, plans, data_dir=out_dir / set_name, audio_dir=audio_root / set_name,
            fsdd_dir=fsdd_dir, seed=args.seed, write_audio=not args.no_audio,
        )
        durations = sorted(p.duration_sec for p in plans)
        share_long = sum(d > 60 for d in durations) / max(len(durations), 1)
        summaries.append(
            data_prep.summarize(set_name, plans, out_dir / set_name, audio_root / set_name, not args.no_audio)
            + (f"; {100 * share_long:.1f} % above 60 s, median {statistics.median(durations):.1f} s" if plans else "")
        )
        print(summaries[-1], flush=True)
    data_prep.write_readme(out_dir, fsdd_dir, args, summaries)
    readme = out_dir / "README.md"
    text = readme.read_text(encoding="utf-8").replace(
        "Generated by `local/data_prep.py`",
        f"Generated by `local/longtail_data_prep.py` (lognormal durations, median {args.median_sec:g} s, "
        f"sigma {args.sigma:g}, {args.min_sec:g}-{args.max_sec:g} s; digit groups of 2-{args.max_group} with "
        f"{args.phrase_pause_min_sec:g}-{args.phrase_pause_max_sec:g} s pauses between groups), reusing `local/data_prep.py`",
        1,
    )
    readme.write_text(text, encoding="utf-8")
    print(f"Wrote {readme} (FSDD attribution, CC BY-SA 4.0)")


if __name__ == "__main__":
    try:
        main()
    except DataPrepError as exc:
        sys.exit(f"longtail_data_prep.py: error: {exc}")
