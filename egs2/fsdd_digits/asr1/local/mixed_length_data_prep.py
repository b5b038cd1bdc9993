#!/usr/bin/env python3
"""A connected-digit corpus whose durations span short clips to minutes-long recordings.

``local/data_prep.py`` draws 1..``--max_digits`` digits per utterance (0.2 s to
about 36 s). This script keeps those utterances (same generator, same streams,
same files layout) and adds, per set, ``--num_long_<set>`` long utterances of
``--long_min_sec``..``--long_max_sec`` seconds: one speaker each, digits drawn
with replacement from that speaker's recordings of the set and appended, with
the same noise-filled pauses, until the drawn target duration is reached.
This is the mixed-length regime of the loss-normalization study
(``docs/loss_normalization.md``): with ``batch_type: numel`` a batch is either
many short clips (few tokens each) or one long recording (hundreds of tokens).

Output layout, sorting, FSDD take split and license note: as ``local/data_prep.py``.
Long utterances are named ``<speaker>-<set>-9xxxx`` (index 90000 + i) and use
their own random stream, so ``--num_long_*`` never changes the short ones.
The output is byte-identical for a given ``--seed``.

Usage (from egs2/fsdd_digits/asr1):

    python local/mixed_length_data_prep.py --out_dir data_mixed --num_train 200 --num_long_train 6
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data_prep  # noqa: E402  (the recipe's own generator, reused unchanged)
from data_prep import DataPrepError, UttPlan  # noqa: E402

LONG_INDEX_OFFSET = 90000  # long utterances: utt index 90000 + i (ids stay distinct and sortable)
LONG_STREAM = 2  # random stream of the long utterances (data_prep.py uses 0 for plans, 1 for noise)


def plan_long(
    set_name: str,
    recordings: list[data_prep.Recording],
    num_utts: int,
    min_sec: float,
    max_sec: float,
    seed: int,
) -> list[UttPlan]:
    """Plans of ``num_utts`` long utterances, target duration uniform in ``[min_sec, max_sec]`` seconds."""
    by_speaker: dict[str, list[data_prep.Recording]] = {}
    for rec in recordings:
        if rec.take in data_prep.SET_TAKES[set_name]:
            by_speaker.setdefault(rec.speaker, []).append(rec)
    if num_utts > 0 and not by_speaker:
        raise DataPrepError(f"No FSDD recordings for the {set_name} set; check --fsdd_dir.")
    speakers = sorted(by_speaker)
    for pool in by_speaker.values():
        pool.sort(key=lambda r: r.name)
    rate = data_prep.SAMPLE_RATE_HZ
    gap_min = round(data_prep.GAP_MIN_SEC * rate)
    gap_max = round(data_prep.GAP_MAX_SEC * rate)
    edge_max = round(data_prep.EDGE_MAX_SEC * rate)
    rng = np.random.default_rng([seed, data_prep.SET_STREAM_ID[set_name], LONG_STREAM])
    plans = []
    for i in range(num_utts):
        speaker = speakers[int(rng.integers(len(speakers)))]
        pool = by_speaker[speaker]
        target_samples = int(rng.uniform(min_sec, max_sec) * rate)
        edges = [int(x) for x in rng.integers(0, edge_max + 1, size=2)]
        sources, pauses = [], []
        total = sum(edges)
        while total < target_samples:
            rec = pool[int(rng.integers(len(pool)))]
            if sources:
                pauses.append(int(rng.integers(gap_min, gap_max + 1)))
                total += pauses[-1]
            sources.append(rec)
            total += rec.num_samples
        index = LONG_INDEX_OFFSET + i
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
    for set_name, default in (("train", 6), ("dev", 2), ("test", 4)):
        parser.add_argument(
            f"--num_long_{set_name}", type=int, default=default, help=f"long utterances added to {set_name}"
        )
    parser.add_argument("--long_min_sec", type=float, default=60.0, help="shortest long utterance (seconds)")
    parser.add_argument("--long_max_sec", type=float, default=120.0, help="longest long utterance (seconds)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = get_parser().parse_args(argv)
    if args.seed < 0 or args.max_digits < 1:
        raise DataPrepError("--seed must be >= 0 and --max_digits >= 1")
    if not 0 < args.long_min_sec <= args.long_max_sec:
        raise DataPrepError(
            f"need 0 < --long_min_sec <= --long_max_sec, got {args.long_min_sec} and {args.long_max_sec}"
        )
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
        num_long = getattr(args, f"num_long_{set_name}")
        if count < 0 or num_long < 0:
            raise DataPrepError(f"--num_{set_name} and --num_long_{set_name} must be >= 0")
        plans = data_prep.plan_set(set_name, recordings, count, args.max_digits, args.seed)
        plans += plan_long(set_name, recordings, num_long, args.long_min_sec, args.long_max_sec, args.seed)
        data_prep.write_set(
            set_name,
            plans,
            data_dir=out_dir / set_name,
            audio_dir=audio_root / set_name,
            fsdd_dir=fsdd_dir,
            seed=args.seed,
            write_audio=not args.no_audio,
        )
        summaries.append(
            data_prep.summarize(set_name, plans, out_dir / set_name, audio_root / set_name, not args.no_audio)
            + f" ({num_long} long, {args.long_min_sec:g}-{args.long_max_sec:g} s)"
        )
        print(summaries[-1], flush=True)
    data_prep.write_readme(out_dir, fsdd_dir, args, summaries)
    print(f"Wrote {out_dir / 'README.md'} (FSDD attribution, CC BY-SA 4.0)")


if __name__ == "__main__":
    try:
        main()
    except DataPrepError as exc:
        sys.exit(f"mixed_length_data_prep.py: error: {exc}")
