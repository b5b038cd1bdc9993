#!/usr/bin/env python3
"""Build a mixed-length connected-digit corpus from the Free Spoken Digit Dataset.

The Free Spoken Digit Dataset (FSDD) holds isolated English digits ("zero" ..
"nine"), one per file, named ``{digit}_{speaker}_{take}.wav`` (mono, 16-bit,
8 kHz, 6 speakers, takes 0..49). This script concatenates recordings of one
speaker into connected-digit utterances of very different lengths (one digit,
~0.2 s, up to ``--max_digits`` digits, ~30 s) and writes Kaldi-style data
directories for ESPnet2:

    <out_dir>/{train,dev,test}/wav.scp      utt_id /abs/path/to/utt.wav
    <out_dir>/{train,dev,test}/text         utt_id seven one four
    <out_dir>/{train,dev,test}/utt2spk      utt_id speaker
    <out_dir>/{train,dev,test}/spk2utt      speaker utt_id utt_id ...
    <out_dir>/{train,dev,test}/utt2dur      utt_id seconds (3 decimals)
    <out_dir>/{train,dev,test}/utt2sources  utt_id 7_jackson_32.wav ... (FSDD files used, in order)
    <out_dir>/README.md                     what was generated, and the FSDD attribution (CC BY-SA 4.0)
    <audio_dir>/{train,dev,test}/<utt_id>.wav   16-bit PCM mono 8 kHz

Split by FSDD take, so that no recording is shared between sets:
takes 0-4 -> test, takes 5-9 -> dev, takes 10-49 -> train.

Each utterance: one speaker (uniform), k digits with k drawn from a long-tailed
(discretised log-normal) distribution clipped to 1..max_digits (median k = 3,
about 3% of utterances with 20 digits or more), k recordings of that speaker
from the set drawn with replacement (random digit, random take), joined by gaps
of 0.05-0.6 s plus 0.0-0.25 s of leading and trailing silence. Gaps are filled
with Gaussian noise at about -65 dBFS rms, so they are never digital silence.
The output is byte-identical for a given ``--seed``; each set uses its own
random streams, so changing ``--num_train`` does not change dev or test.

Usage (from the recipe directory egs2/fsdd_digits/asr1):

    python local/data_prep.py                        # defaults: 1500/150/150 utterances into data/
    python local/data_prep.py --seed 1 --out_dir data_seed1
    python local/data_prep.py --num_train 12 --num_dev 4 --num_test 4 --out_dir data_tiny
    python local/data_prep.py --no_audio             # plan only: text, utt2dur, ... (no wav, no wav.scp)
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

SAMPLE_RATE_HZ = 8000
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# FSDD takes that belong to each set (inclusive ranges); every take 0..49 is in exactly one set.
SET_TAKES = {"train": range(10, 50), "dev": range(5, 10), "test": range(0, 5)}
# Fixed index per set, mixed into the random seed so that each set has its own stream.
SET_STREAM_ID = {"train": 0, "dev": 1, "test": 2}

GAP_MIN_SEC = 0.05  # pause between two digits
GAP_MAX_SEC = 0.6
EDGE_MAX_SEC = 0.25  # leading and trailing silence, each in [0, EDGE_MAX_SEC]
NOISE_RMS_DBFS = -65.0  # level of the noise that fills pauses
# Number of digits k = 1 + floor(exp(N(log(DIGITS_LOGNORMAL_MEDIAN), DIGITS_LOGNORMAL_SIGMA))),
# clipped to max_digits: median k = 3, ~74% of utterances have 1-5 digits, ~3% have 20 or more.
DIGITS_LOGNORMAL_MEDIAN = 2.5
DIGITS_LOGNORMAL_SIGMA = 1.1

# The recipe directory (egs2/fsdd_digits/asr1); the default --fsdd_dir is relative to it.
RECIPE_DIR = Path(__file__).resolve().parent.parent
DEFAULT_FSDD_DIR = RECIPE_DIR / "../../../../shared/data/fsdd/recordings"

FSDD_NAME_RE = re.compile(r"^(?P<digit>[0-9])_(?P<speaker>[A-Za-z0-9]+)_(?P<take>[0-9]+)\.wav$")

FSDD_ATTRIBUTION = (
    "Free Spoken Digit Dataset (FSDD), https://github.com/Jakobovski/free-spoken-digit-dataset, "
    "licensed under Creative Commons Attribution-ShareAlike 4.0 International (CC BY-SA 4.0)."
)


class DataPrepError(Exception):
    """An input problem the user has to fix; printed without a traceback."""


@dataclass(frozen=True)
class Recording:
    """One FSDD file."""

    name: str  # file name inside fsdd_dir, e.g. "7_jackson_32.wav"
    digit: int
    speaker: str
    take: int
    num_samples: int


@dataclass(frozen=True)
class UttPlan:
    """Everything needed to render one utterance; audio is fully determined by it plus the noise seed."""

    utt_id: str
    index: int  # generation index within the set
    speaker: str
    sources: tuple[Recording, ...]
    # Silence lengths: leading, k-1 pauses between digits, trailing (k+1 values).
    gaps_samples: tuple[int, ...]

    @property
    def num_samples(self) -> int:
        return sum(r.num_samples for r in self.sources) + sum(self.gaps_samples)

    @property
    def duration_sec(self) -> float:
        return self.num_samples / SAMPLE_RATE_HZ

    @property
    def words(self) -> list[str]:
        return [DIGIT_WORDS[r.digit] for r in self.sources]


def scan_fsdd(fsdd_dir: Path) -> list[Recording]:
    """List and validate the FSDD recordings (headers only)."""
    if not fsdd_dir.is_dir():
        raise DataPrepError(
            f"FSDD recordings directory not found: {fsdd_dir}\n"
            "Fix: pass --fsdd_dir pointing at the folder that holds {digit}_{speaker}_{take}.wav "
            "files (in this project: shared/data/fsdd/recordings)."
        )
    paths = sorted(fsdd_dir.glob("*.wav"))
    if not paths:
        raise DataPrepError(
            f"No .wav files in {fsdd_dir}\n"
            "Fix: pass --fsdd_dir pointing at the FSDD 'recordings' folder "
            "(files named {digit}_{speaker}_{take}.wav)."
        )
    recordings = []
    for path in paths:
        match = FSDD_NAME_RE.match(path.name)
        if match is None:
            raise DataPrepError(
                f"Unexpected file name {path} (expected {{digit}}_{{speaker}}_{{take}}.wav).\n"
                "Fix: --fsdd_dir must hold only the FSDD recordings."
            )
        try:
            info = sf.info(str(path))
        except RuntimeError as exc:
            raise DataPrepError(f"Cannot read {path}: {exc}\nFix: re-fetch this FSDD recording.") from exc
        if info.samplerate != SAMPLE_RATE_HZ or info.channels != 1:
            raise DataPrepError(
                f"{path} is {info.samplerate} Hz with {info.channels} channel(s); "
                f"FSDD recordings must be {SAMPLE_RATE_HZ} Hz mono.\n"
                "Fix: point --fsdd_dir at the original, unmodified FSDD recordings."
            )
        if info.frames == 0:
            raise DataPrepError(f"{path} is empty.\nFix: re-fetch this FSDD recording.")
        recordings.append(
            Recording(
                name=path.name,
                digit=int(match["digit"]),
                speaker=match["speaker"],
                take=int(match["take"]),
                num_samples=int(info.frames),
            )
        )
    return recordings


def draw_num_digits(rng: np.random.Generator, max_digits: int) -> int:
    """Long-tailed number of digits in 1..max_digits (mostly 1-5, sometimes 20-40)."""
    draw = np.exp(rng.normal(np.log(DIGITS_LOGNORMAL_MEDIAN), DIGITS_LOGNORMAL_SIGMA))
    return int(min(max_digits, 1 + np.floor(draw)))


def plan_set(
    set_name: str, recordings: list[Recording], num_utts: int, max_digits: int, seed: int
) -> list[UttPlan]:
    """Decide speaker, sources and pauses of every utterance of one set (no audio is read)."""
    by_speaker: dict[str, list[Recording]] = {}
    for rec in recordings:
        if rec.take in SET_TAKES[set_name]:
            by_speaker.setdefault(rec.speaker, []).append(rec)
    if num_utts > 0 and not by_speaker:
        takes = SET_TAKES[set_name]
        raise DataPrepError(
            f"No FSDD recordings with takes {takes.start}-{takes.stop - 1} for the {set_name} set.\n"
            "Fix: point --fsdd_dir at the complete FSDD recordings folder."
        )
    speakers = sorted(by_speaker)
    for pool in by_speaker.values():
        pool.sort(key=lambda r: r.name)

    rng = np.random.default_rng([seed, SET_STREAM_ID[set_name], 0])
    gap_min_samples = round(GAP_MIN_SEC * SAMPLE_RATE_HZ)
    gap_max_samples = round(GAP_MAX_SEC * SAMPLE_RATE_HZ)
    edge_max_samples = round(EDGE_MAX_SEC * SAMPLE_RATE_HZ)
    plans = []
    for index in range(num_utts):
        speaker = speakers[int(rng.integers(len(speakers)))]
        pool = by_speaker[speaker]
        num_digits = draw_num_digits(rng, max_digits)
        source_ids = rng.integers(len(pool), size=num_digits)
        pauses = rng.integers(gap_min_samples, gap_max_samples + 1, size=num_digits - 1)
        edges = rng.integers(0, edge_max_samples + 1, size=2)
        plans.append(
            UttPlan(
                utt_id=f"{speaker}-{set_name}-{index:05d}",
                index=index,
                speaker=speaker,
                sources=tuple(pool[int(i)] for i in source_ids),
                gaps_samples=(int(edges[0]), *(int(p) for p in pauses), int(edges[1])),
            )
        )
    return plans


def render(
    plan: UttPlan, audio: dict[str, np.ndarray], fsdd_dir: Path, seed: int, set_name: str
) -> np.ndarray:
    """Concatenate the sources of one utterance with noise-filled pauses; returns int16 samples."""
    noise_rng = np.random.default_rng([seed, SET_STREAM_ID[set_name], 1, plan.index])
    noise_rms_lsb = 32768.0 * 10.0 ** (NOISE_RMS_DBFS / 20.0)
    noise = np.round(noise_rng.normal(0.0, noise_rms_lsb, size=plan.num_samples))
    out = np.clip(noise, -32768, 32767).astype(np.int16)
    pos_samples = plan.gaps_samples[0]
    for rec, gap_after_samples in zip(plan.sources, plan.gaps_samples[1:]):
        if rec.name not in audio:
            samples, _ = sf.read(str(fsdd_dir / rec.name), dtype="int16")
            audio[rec.name] = samples
        samples = audio[rec.name]
        out[pos_samples : pos_samples + len(samples)] = samples
        pos_samples += len(samples) + gap_after_samples
    assert pos_samples == plan.num_samples
    return out


def write_lines(path: Path, lines: list[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def write_set(
    set_name: str,
    plans: list[UttPlan],
    data_dir: Path,
    audio_dir: Path,
    fsdd_dir: Path,
    seed: int,
    write_audio: bool,
) -> None:
    """Write the audio (optional) and the Kaldi files of one set, sorted by utt_id."""
    data_dir.mkdir(parents=True, exist_ok=True)
    plans = sorted(plans, key=lambda p: p.utt_id.encode())  # LC_ALL=C byte order
    wav_paths = {}
    if write_audio:
        audio_dir.mkdir(parents=True, exist_ok=True)
        audio_cache: dict[str, np.ndarray] = {}
        for plan in tqdm(plans, desc=f"{set_name}: writing audio", unit="utt", file=sys.stderr):
            wav_path = audio_dir / f"{plan.utt_id}.wav"
            samples = render(plan, audio_cache, fsdd_dir, seed, set_name)
            sf.write(str(wav_path), samples, SAMPLE_RATE_HZ, subtype="PCM_16", format="WAV")
            wav_paths[plan.utt_id] = wav_path
        write_lines(data_dir / "wav.scp", [f"{p.utt_id} {wav_paths[p.utt_id]}" for p in plans])
    else:
        # A wav.scp from an earlier run would not match the new text; drop it.
        (data_dir / "wav.scp").unlink(missing_ok=True)

    write_lines(data_dir / "text", [f"{p.utt_id} {' '.join(p.words)}" for p in plans])
    write_lines(data_dir / "utt2spk", [f"{p.utt_id} {p.speaker}" for p in plans])
    write_lines(data_dir / "utt2dur", [f"{p.utt_id} {p.duration_sec:.3f}" for p in plans])
    write_lines(
        data_dir / "utt2sources", [f"{p.utt_id} {' '.join(r.name for r in p.sources)}" for p in plans]
    )
    spk2utt: dict[str, list[str]] = {}
    for plan in plans:
        spk2utt.setdefault(plan.speaker, []).append(plan.utt_id)
    write_lines(
        data_dir / "spk2utt",
        [f"{spk} {' '.join(utts)}" for spk, utts in sorted(spk2utt.items(), key=lambda kv: kv[0].encode())],
    )


def summarize(set_name: str, plans: list[UttPlan], data_dir: Path, audio_dir: Path, write_audio: bool) -> str:
    """One human-readable line about a set."""
    if not plans:
        return f"{set_name}: 0 utterances -> {data_dir}"
    durations_sec = [p.duration_sec for p in plans]
    total_hours = sum(durations_sec) / 3600.0
    audio_note = f"audio in {audio_dir}" if write_audio else "no audio (--no_audio)"
    return (
        f"{set_name}: {len(plans)} utterances, {total_hours:.3f} h, duration "
        f"min/median/max = {min(durations_sec):.2f}/{statistics.median(durations_sec):.2f}/"
        f"{max(durations_sec):.2f} s, max {max(len(p.sources) for p in plans)} digits "
        f"-> {data_dir} ({audio_note})"
    )


def write_readme(out_dir: Path, fsdd_dir: Path, args: argparse.Namespace, summaries: list[str]) -> None:
    """Describe the generated corpus and keep the FSDD attribution with it."""
    lines = [
        "# Connected-digit corpus derived from the Free Spoken Digit Dataset",
        "",
        "Generated by `local/data_prep.py` of the fsdd_digits/asr1 recipe. Each utterance concatenates",
        "isolated-digit recordings of one FSDD speaker, with 0.05-0.6 s pauses and 0-0.25 s of leading",
        f"and trailing silence, filled with Gaussian noise at {NOISE_RMS_DBFS:g} dBFS rms. 16-bit PCM mono "
        f"{SAMPLE_RATE_HZ} Hz.",
        "Split by FSDD take: 0-4 test, 5-9 dev, 10-49 train; no recording is used in two sets.",
        "`<set>/utt2sources` lists the FSDD files used by each utterance, in order.",
        "",
        f"Settings: seed={args.seed}, num_train={args.num_train}, num_dev={args.num_dev}, "
        f"num_test={args.num_test}, max_digits={args.max_digits}, audio={'no' if args.no_audio else 'yes'}.",
        f"Source recordings: {fsdd_dir}",
        "",
        *[f"- {s}" for s in summaries],
        "",
        "## License and attribution",
        "",
        "This derived corpus is a remix of the " + FSDD_ATTRIBUTION,
        "It is shared under the same license (CC BY-SA 4.0).",
    ]
    source_readme = fsdd_dir.parent / "README.md"
    if source_readme.is_file():
        lines += ["", "## README of the source recordings (verbatim)", ""]
        source_lines = source_readme.read_text(encoding="utf-8").splitlines()
        lines += ["> " + line if line else ">" for line in source_lines]
    out_dir.mkdir(parents=True, exist_ok=True)
    write_lines(out_dir / "README.md", lines)


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--fsdd_dir",
        type=Path,
        default=DEFAULT_FSDD_DIR,
        help="FSDD recordings folder ({digit}_{speaker}_{take}.wav), read only; "
        "default: ../../../../shared/data/fsdd/recordings relative to the recipe dir",
    )
    parser.add_argument("--out_dir", type=Path, default=Path("data"), help="where the Kaldi data dirs go")
    parser.add_argument(
        "--audio_dir", type=Path, default=None, help="where the wav files go (default: <out_dir>/wav)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (>= 0); same seed, same bytes")
    parser.add_argument("--num_train", type=int, default=1500, help="number of train utterances")
    parser.add_argument("--num_dev", type=int, default=150, help="number of dev utterances")
    parser.add_argument("--num_test", type=int, default=150, help="number of test utterances")
    parser.add_argument("--max_digits", type=int, default=40, help="most digits in one utterance")
    parser.add_argument(
        "--no_audio",
        action="store_true",
        help="plan only: write text, utt2dur, utt2spk, spk2utt, utt2sources, but no audio and no wav.scp",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = get_parser().parse_args(argv)
    if args.seed < 0:
        raise DataPrepError(f"--seed must be >= 0, got {args.seed}")
    if args.max_digits < 1:
        raise DataPrepError(f"--max_digits must be >= 1, got {args.max_digits}")
    counts = {"train": args.num_train, "dev": args.num_dev, "test": args.num_test}
    for set_name, count in counts.items():
        if count < 0:
            raise DataPrepError(f"--num_{set_name} must be >= 0, got {count}")

    fsdd_dir = args.fsdd_dir.resolve()
    out_dir = args.out_dir.resolve()
    audio_root = (args.audio_dir if args.audio_dir is not None else args.out_dir / "wav").resolve()
    for path in (out_dir, audio_root):
        if path == fsdd_dir or fsdd_dir in path.parents:
            raise DataPrepError(
                f"Refusing to write into the FSDD folder {fsdd_dir}; choose another --out_dir/--audio_dir."
            )

    recordings = scan_fsdd(fsdd_dir)
    summaries = []
    for set_name, count in counts.items():
        plans = plan_set(set_name, recordings, count, args.max_digits, args.seed)
        write_set(
            set_name,
            plans,
            data_dir=out_dir / set_name,
            audio_dir=audio_root / set_name,
            fsdd_dir=fsdd_dir,
            seed=args.seed,
            write_audio=not args.no_audio,
        )
        summaries.append(
            summarize(set_name, plans, out_dir / set_name, audio_root / set_name, not args.no_audio)
        )
        print(summaries[-1], flush=True)
    write_readme(out_dir, fsdd_dir, args, summaries)
    print(f"Wrote {out_dir / 'README.md'} (FSDD attribution, CC BY-SA 4.0)")


if __name__ == "__main__":
    try:
        main()
    except DataPrepError as exc:
        sys.exit(f"data_prep.py: error: {exc}")
