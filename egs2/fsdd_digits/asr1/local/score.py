#!/usr/bin/env python3
"""Score ASR decoding output against a Kaldi reference: WER, CER and a breakdown by length.

Inputs (Kaldi/ESPnet "text" format, one utterance per line):

    --ref      utt_id word word ...     (reference, e.g. data/test/text)
    --hyp      utt_id word word ...     (ESPnet decode output; a line with only the utt_id
                                         is an empty hypothesis and counts as all deletions)
    --utt2dur  utt_id seconds           (optional; enables the breakdown by duration)

Every reference utterance must have a hypothesis line, and every hypothesis must
belong to a reference utterance; otherwise the script stops with an error.

WER is computed on words. CER is computed on the characters of each sentence
with the spaces removed ("seven one" -> "sevenone"). Edit counts come from
jiwer (``jiwer.process_words`` / ``jiwer.process_characters``); empty
references or hypotheses are handled here, not by jiwer.

Outputs in --out_dir:

    result.txt   human-readable summary (also printed), ending with "WER 12.34 % (<name>)"
    result.json  the same numbers, machine-readable
    per_utt.tsv  one row per utterance

Usage (from the recipe directory):

    python local/score.py --ref data/test/text --hyp exp/asr/decode_test/text \\
        --utt2dur data/test/utt2dur --out_dir exp/asr/decode_test/score --name test
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import jiwer

# Breakdown bins, [low, high).
DURATION_BINS_SEC = ((0.0, 1.0), (1.0, 3.0), (3.0, 10.0), (10.0, 30.0), (30.0, math.inf))
NUM_WORDS_BINS = ((0, 2), (2, 6), (6, 11), (11, 21), (21, math.inf))
MAX_LISTED_IDS = 5  # how many offending utt_ids an error message names


class ScoringError(Exception):
    """An input problem; printed without a traceback."""


@dataclass(frozen=True)
class EditCounts:
    """Edit operations of one alignment, or a sum of them."""

    sub: int = 0
    dele: int = 0
    ins: int = 0
    ref_len: int = 0

    def __add__(self, other: EditCounts) -> EditCounts:
        return EditCounts(
            self.sub + other.sub, self.dele + other.dele, self.ins + other.ins, self.ref_len + other.ref_len
        )

    @property
    def errors(self) -> int:
        return self.sub + self.dele + self.ins

    @property
    def rate_percent(self) -> float | None:
        """Error rate in percent; None when the reference is empty (undefined)."""
        if self.ref_len == 0:
            return None
        return 100.0 * self.errors / self.ref_len


@dataclass(frozen=True)
class UttScore:
    utt_id: str
    duration_sec: float | None
    ref_words: tuple[str, ...]
    hyp_words: tuple[str, ...]
    words: EditCounts
    chars: EditCounts


def read_text(path: Path, what: str) -> dict[str, tuple[str, ...]]:
    """Read a Kaldi text file: utt_id followed by zero or more words."""
    if not path.is_file():
        raise ScoringError(f"{what} file not found: {path}")
    utts: dict[str, tuple[str, ...]] = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            fields = line.split()
            if not fields:
                continue
            utt_id, words = fields[0], tuple(fields[1:])
            if utt_id in utts:
                raise ScoringError(f"{path}:{line_no}: utterance {utt_id} appears twice in the {what} file")
            utts[utt_id] = words
    return utts


def read_utt2dur(path: Path) -> dict[str, float]:
    if not path.is_file():
        raise ScoringError(f"utt2dur file not found: {path}")
    durations_sec = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            fields = line.split()
            if not fields:
                continue
            try:
                utt_id, duration_sec = fields[0], float(fields[1])
                if len(fields) != 2:
                    raise ValueError
            except (IndexError, ValueError):
                raise ScoringError(
                    f"{path}:{line_no}: expected 'utt_id seconds', got {line.rstrip()!r}"
                ) from None
            durations_sec[utt_id] = duration_sec
    return durations_sec


def edit_counts(ref: str, hyp: str, unit: str) -> EditCounts:
    """Levenshtein edit counts of one sentence pair; unit is "word" or "char".

    Empty strings are handled here so that jiwer only sees non-empty input: an
    empty hypothesis is all deletions, an empty reference all insertions.
    """
    if unit == "word":
        ref_len, hyp_len = len(ref.split()), len(hyp.split())
    else:
        ref_len, hyp_len = len(ref), len(hyp)
    if ref_len == 0 or hyp_len == 0:
        return EditCounts(sub=0, dele=ref_len, ins=hyp_len, ref_len=ref_len)
    out = jiwer.process_words(ref, hyp) if unit == "word" else jiwer.process_characters(ref, hyp)
    counts = EditCounts(sub=out.substitutions, dele=out.deletions, ins=out.insertions, ref_len=ref_len)
    assert out.hits + out.substitutions + out.deletions == ref_len, "jiwer counts do not add up"
    return counts


def score_utterances(
    refs: dict[str, tuple[str, ...]],
    hyps: dict[str, tuple[str, ...]],
    durations_sec: dict[str, float] | None,
    hyp_path: Path,
) -> list[UttScore]:
    missing = [u for u in refs if u not in hyps]
    if missing:
        raise ScoringError(
            f"decoding was incomplete: {len(missing)} of {len(refs)} reference utterances have no "
            f"hypothesis line in {hyp_path}, e.g. {', '.join(missing[:MAX_LISTED_IDS])}"
        )
    extra = [u for u in hyps if u not in refs]
    if extra:
        raise ScoringError(
            f"{len(extra)} hypotheses in {hyp_path} are for utterances that are not in the reference, "
            f"e.g. {', '.join(extra[:MAX_LISTED_IDS])} (wrong --ref for this decoding?)"
        )
    if durations_sec is not None:
        no_dur = [u for u in refs if u not in durations_sec]
        if no_dur:
            raise ScoringError(
                f"{len(no_dur)} reference utterances have no entry in utt2dur, "
                f"e.g. {', '.join(no_dur[:MAX_LISTED_IDS])}"
            )
    scores = []
    for utt_id in sorted(refs, key=str.encode):
        ref_words, hyp_words = refs[utt_id], hyps[utt_id]
        scores.append(
            UttScore(
                utt_id=utt_id,
                duration_sec=None if durations_sec is None else durations_sec[utt_id],
                ref_words=ref_words,
                hyp_words=hyp_words,
                words=edit_counts(" ".join(ref_words), " ".join(hyp_words), "word"),
                chars=edit_counts("".join(ref_words), "".join(hyp_words), "char"),
            )
        )
    return scores


def total(counts: list[EditCounts]) -> EditCounts:
    result = EditCounts()
    for c in counts:
        result = result + c
    return result


def bin_label(low: float, high: float, unit: str) -> str:
    if unit == "sec":
        return f"[{low:g},{'inf' if math.isinf(high) else f'{high:g}'}) s"
    if math.isinf(high):
        return f">={low:g} words"
    return f"{low:g}-{high - 1:g} words"


def breakdown(scores: list[UttScore], unit: str) -> list[dict]:
    """WER per length bin; unit "sec" bins by duration, "words" by number of reference words."""
    bins = DURATION_BINS_SEC if unit == "sec" else NUM_WORDS_BINS
    rows = []
    for low, high in bins:
        in_bin = [
            s
            for s in scores
            if low <= (s.duration_sec if unit == "sec" else len(s.ref_words)) < high
        ]
        counts = total([s.words for s in in_bin])
        rows.append(
            {
                "bin": bin_label(low, high, unit),
                "num_utts": len(in_bin),
                "num_words": counts.ref_len,
                "wer": counts.rate_percent,
            }
        )
    return rows


def fmt_rate(rate_percent: float | None) -> str:
    return "n/a" if rate_percent is None else f"{rate_percent:.2f}"


def format_table(title: str, rows: list[dict]) -> list[str]:
    lines = [title, f"  {'bin':<16}{'#utt':>7}{'#words':>9}{'WER%':>9}"]
    for row in rows:
        lines.append(f"  {row['bin']:<16}{row['num_utts']:>7}{row['num_words']:>9}{fmt_rate(row['wer']):>9}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--ref", type=Path, required=True, help="reference Kaldi text file")
    parser.add_argument("--hyp", type=Path, required=True, help="hypothesis text file (ESPnet decode output)")
    parser.add_argument(
        "--utt2dur", type=Path, default=None, help="optional utt_id -> seconds, for the breakdown"
    )
    parser.add_argument(
        "--out_dir", type=Path, required=True, help="where result.txt/json and per_utt.tsv go"
    )
    parser.add_argument(
        "--name", default=None, help="set name for the last line (default: basename of out_dir)"
    )
    args = parser.parse_args(argv)
    name = args.name if args.name is not None else args.out_dir.resolve().name

    refs = read_text(args.ref, "reference")
    if not refs:
        raise ScoringError(f"reference file {args.ref} has no utterances")
    hyps = read_text(args.hyp, "hypothesis")
    durations_sec = read_utt2dur(args.utt2dur) if args.utt2dur is not None else None
    scores = score_utterances(refs, hyps, durations_sec, args.hyp)

    wer = total([s.words for s in scores])
    cer = total([s.chars for s in scores])
    by_num_words = breakdown(scores, "words")
    by_length = breakdown(scores, "sec") if durations_sec is not None else by_num_words
    num_err_utts = sum(1 for s in scores if s.words.errors > 0)

    result = {
        "name": name,
        "num_utts": len(scores),
        "wer": wer.rate_percent,
        "cer": cer.rate_percent,
        "wer_sub": wer.sub,
        "wer_del": wer.dele,
        "wer_ins": wer.ins,
        "wer_ref_words": wer.ref_len,
        "cer_sub": cer.sub,
        "cer_del": cer.dele,
        "cer_ins": cer.ins,
        "cer_ref_chars": cer.ref_len,
        "ser": 100.0 * num_err_utts / len(scores),
        "num_empty_hyps": sum(1 for s in scores if not s.hyp_words),
        "cer_definition": "characters of each sentence with spaces removed",
        "length_unit": "sec" if durations_sec is not None else "words",
        "by_length": by_length,
        "by_num_words": by_num_words,
    }

    lines = [
        f"ref: {args.ref}",
        f"hyp: {args.hyp}",
        f"#utterances: {len(scores)} ({result['num_empty_hyps']} with an empty hypothesis)",
        f"WER {fmt_rate(wer.rate_percent):>6} %  "
        f"(S={wer.sub} D={wer.dele} I={wer.ins} N={wer.ref_len} words)",
        f"CER {fmt_rate(cer.rate_percent):>6} %  (S={cer.sub} D={cer.dele} I={cer.ins} N={cer.ref_len} "
        "characters; spaces removed)",
        f"SER {result['ser']:>6.2f} %  ({num_err_utts} of {len(scores)} utterances with a word error)",
        "",
    ]
    if durations_sec is not None:
        lines += format_table("WER by utterance duration (utt2dur):", by_length) + [""]
    lines += format_table("WER by number of reference words:", by_num_words) + [""]
    lines.append(f"WER {fmt_rate(wer.rate_percent)} % ({name})")

    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "result.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (args.out_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    with open(args.out_dir / "per_utt.tsv", "w", encoding="utf-8", newline="\n") as f:
        f.write("utt_id\tduration_sec\tref\thyp\tnum_ref_words\tsub\tdel\tins\twer\n")
        for s in scores:
            duration = "NA" if s.duration_sec is None else f"{s.duration_sec:.3f}"
            wer_utt = s.words.rate_percent
            f.write(
                f"{s.utt_id}\t{duration}\t{' '.join(s.ref_words)}\t{' '.join(s.hyp_words)}\t"
                f"{s.words.ref_len}\t{s.words.sub}\t{s.words.dele}\t{s.words.ins}\t"
                f"{'NA' if wer_utt is None else f'{wer_utt:.2f}'}\n"
            )
    print("\n".join(lines))


if __name__ == "__main__":
    try:
        main()
    except ScoringError as exc:
        sys.exit(f"score.py: error: {exc}")
