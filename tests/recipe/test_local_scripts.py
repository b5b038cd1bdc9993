"""Tests of the fsdd_digits recipe's local scripts: local/data_prep.py and local/score.py.

Both scripts are run as the recipe runs them, in a subprocess. The data_prep
tests read the FSDD recordings in the project's shared/data/fsdd/recordings
(they fail, not skip, when the recordings are missing).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from factory import FSDD_DIR, RECIPE_DIR

pytestmark = pytest.mark.slow  # recipe scripts

DATA_PREP = RECIPE_DIR / "local" / "data_prep.py"
SCORE = RECIPE_DIR / "local" / "score.py"

SAMPLE_RATE_HZ = 8000
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
SET_TAKES = {"train": range(10, 50), "dev": range(5, 10), "test": range(0, 5)}
TINY_COUNTS = {"train": 12, "dev": 4, "test": 4}
TINY_ARGS = ["--num_train", "12", "--num_dev", "4", "--num_test", "4"]
KALDI_FILES = ("text", "utt2spk", "spk2utt", "utt2dur", "utt2sources")
SOURCE_RE = re.compile(r"^([0-9])_([A-Za-z0-9]+)_([0-9]+)\.wav$")

def run_script(script: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{script.name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def read_table(path: Path) -> dict[str, list[str]]:
    """Kaldi-style file -> {first field: remaining fields}."""
    table = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        table[fields[0]] = fields[1:]
    return table


def first_fields(path: Path) -> list[str]:
    return [line.split()[0] for line in path.read_text(encoding="utf-8").splitlines()]


def run_data_prep(out_dir: Path, *args: str) -> Path:
    run_script(DATA_PREP, "--fsdd_dir", FSDD_DIR, "--out_dir", out_dir, *args)
    return out_dir


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """Small corpora: seed 0 twice, seed 1, and seed 0 planned without audio."""
    root = tmp_path_factory.mktemp("data_prep")
    return {
        "a": run_data_prep(root / "a", *TINY_ARGS),
        "b": run_data_prep(root / "b", *TINY_ARGS),
        "seed1": run_data_prep(root / "seed1", *TINY_ARGS, "--seed", "1"),
        "no_audio": run_data_prep(root / "no_audio", *TINY_ARGS, "--no_audio"),
    }


@pytest.fixture(scope="module")
def default_plan(tmp_path_factory) -> Path:
    """The default-size corpus, planned only (no audio)."""
    return run_data_prep(tmp_path_factory.mktemp("default_plan") / "data", "--no_audio")


def wav_paths(data_dir: Path) -> dict[str, Path]:
    return {utt: Path(fields[0]) for utt, fields in read_table(data_dir / "wav.scp").items()}


# --------------------------------------------------------------------------- data_prep.py


def test_same_seed_gives_identical_output(tiny):
    for set_name in TINY_COUNTS:
        a, b = tiny["a"] / set_name, tiny["b"] / set_name
        for name in KALDI_FILES:
            assert (a / name).read_bytes() == (b / name).read_bytes(), f"{set_name}/{name} differs"
        wavs_a, wavs_b = wav_paths(a), wav_paths(b)
        assert list(wavs_a) == list(wavs_b)
        for utt_id in wavs_a:
            assert wavs_a[utt_id] != wavs_b[utt_id]  # really two separate runs
            assert wavs_a[utt_id].read_bytes() == wavs_b[utt_id].read_bytes(), f"{utt_id}.wav differs"


def test_different_seed_gives_different_output(tiny):
    for set_name in TINY_COUNTS:
        a, c = tiny["a"] / set_name, tiny["seed1"] / set_name
        assert (a / "text").read_text() != (c / "text").read_text()
        assert (a / "utt2dur").read_text() != (c / "utt2dur").read_text()


def test_no_audio_plans_the_same_corpus(tiny):
    for set_name in TINY_COUNTS:
        a, planned = tiny["a"] / set_name, tiny["no_audio"] / set_name
        for name in KALDI_FILES:
            assert (a / name).read_bytes() == (planned / name).read_bytes(), f"{set_name}/{name} differs"
        assert not (planned / "wav.scp").exists()
    assert not (tiny["no_audio"] / "wav").exists()


def test_kaldi_files_are_consistent_and_sorted(tiny):
    for set_name, count in TINY_COUNTS.items():
        data_dir = tiny["a"] / set_name
        utt_ids = first_fields(data_dir / "text")
        assert len(utt_ids) == count
        assert utt_ids == sorted(utt_ids, key=str.encode)
        assert len(set(utt_ids)) == count
        for name in ("wav.scp", "utt2spk", "utt2dur", "utt2sources"):
            assert first_fields(data_dir / name) == utt_ids, f"{set_name}/{name} order or ids differ"
        utt2spk = read_table(data_dir / "utt2spk")
        for utt_id, (speaker,) in utt2spk.items():
            assert re.fullmatch(rf"{re.escape(speaker)}-{set_name}-[0-9]{{5}}", utt_id), utt_id
        spk2utt = read_table(data_dir / "spk2utt")
        assert list(spk2utt) == sorted(spk2utt, key=str.encode)
        assert {u: [s] for s, utts in spk2utt.items() for u in utts} == utt2spk
        for utt_id, path in wav_paths(data_dir).items():
            assert path.is_absolute() and path.is_file()
            assert path == tiny["a"] / "wav" / set_name / f"{utt_id}.wav"
    readme = (tiny["a"] / "README.md").read_text(encoding="utf-8")
    assert "CC BY-SA 4.0" in readme and "Free Spoken Digit Dataset" in readme


def test_sets_use_only_their_own_takes_and_speaker(tiny):
    used_by_set = {}
    for set_name in TINY_COUNTS:
        data_dir = tiny["a"] / set_name
        utt2spk = read_table(data_dir / "utt2spk")
        used = set()
        for utt_id, sources in read_table(data_dir / "utt2sources").items():
            assert sources, utt_id
            for source in sources:
                match = SOURCE_RE.match(source)
                assert match, source
                assert (FSDD_DIR / source).is_file()
                assert int(match[3]) in SET_TAKES[set_name], f"{utt_id} uses {source}"
                assert match[2] == utt2spk[utt_id][0], f"{utt_id} mixes speakers"
                used.add(source)
        used_by_set[set_name] = used
    assert not used_by_set["train"] & used_by_set["dev"]
    assert not used_by_set["train"] & used_by_set["test"]
    assert not used_by_set["dev"] & used_by_set["test"]


def test_text_matches_the_digits_of_the_sources(tiny):
    for set_name in TINY_COUNTS:
        data_dir = tiny["a"] / set_name
        text = read_table(data_dir / "text")
        for utt_id, sources in read_table(data_dir / "utt2sources").items():
            expected = [DIGIT_WORDS[int(SOURCE_RE.match(s)[1])] for s in sources]
            assert text[utt_id] == expected


def find_exact(haystack: np.ndarray, needle: np.ndarray, start: int) -> int:
    """First index >= start where needle occurs exactly in haystack, or -1."""
    candidates = np.flatnonzero(haystack[start : len(haystack) - len(needle) + 1] == needle[0]) + start
    for pos in candidates:
        if np.array_equal(haystack[pos : pos + len(needle)], needle):
            return int(pos)
    return -1


def test_audio_is_the_sources_joined_by_noise_filled_pauses(tiny):
    noise_rms_dbfs = []
    for set_name in TINY_COUNTS:
        data_dir = tiny["a"] / set_name
        utt2dur = read_table(data_dir / "utt2dur")
        utt2sources = read_table(data_dir / "utt2sources")
        for utt_id, path in wav_paths(data_dir).items():
            info = sf.info(str(path))
            assert (info.samplerate, info.channels, info.subtype) == (SAMPLE_RATE_HZ, 1, "PCM_16")
            audio, _ = sf.read(str(path), dtype="int16")
            duration_sec = len(audio) / SAMPLE_RATE_HZ
            assert duration_sec >= 0.1
            assert abs(duration_sec - float(utt2dur[utt_id][0])) <= 0.0005 + 1e-9

            # Every source recording appears, unchanged and in order; the rest are pauses.
            pos_samples, gaps_samples, gap_audio = 0, [], []
            for source in utt2sources[utt_id]:
                samples, _ = sf.read(str(FSDD_DIR / source), dtype="int16")
                found = find_exact(audio, samples, pos_samples)
                assert found >= 0, f"{source} not found in {utt_id}"
                gaps_samples.append(found - pos_samples)
                gap_audio.append(audio[pos_samples:found])
                pos_samples = found + len(samples)
            gaps_samples.append(len(audio) - pos_samples)
            gap_audio.append(audio[pos_samples:])

            assert 0 <= gaps_samples[0] <= 0.25 * SAMPLE_RATE_HZ
            assert 0 <= gaps_samples[-1] <= 0.25 * SAMPLE_RATE_HZ
            for gap in gaps_samples[1:-1]:
                assert 0.05 * SAMPLE_RATE_HZ <= gap <= 0.6 * SAMPLE_RATE_HZ, f"{gap}-sample pause in {utt_id}"
            pauses = np.concatenate(gap_audio).astype(np.float64)
            if len(pauses) >= 100:
                noise_rms_dbfs.append(20 * np.log10(np.sqrt(np.mean(pauses**2)) / 32768))
                # Never digital silence: no run of 8 exact zeros.
                zero = np.concatenate([[0], (pauses == 0).astype(np.int8), [0]])
                edges = np.flatnonzero(np.diff(zero))
                assert (edges[1::2] - edges[::2]).max(initial=0) < 8, f"digital silence in {utt_id}"
    assert noise_rms_dbfs
    assert all(-68 < level < -62 for level in noise_rms_dbfs), noise_rms_dbfs


def test_default_corpus_has_mixed_lengths(default_plan):
    for set_name, count in {"train": 1500, "dev": 150, "test": 150}.items():
        durations_sec = [float(v[0]) for v in read_table(default_plan / set_name / "utt2dur").values()]
        num_digits = [len(v) for v in read_table(default_plan / set_name / "text").values()]
        assert len(durations_sec) == count
        assert min(durations_sec) >= 0.1
        assert 1 <= min(num_digits) and max(num_digits) <= 40
        assert 1.0 <= statistics.median(durations_sec) <= 5.0, set_name
        assert max(durations_sec) >= 15.0, set_name
    train_digits = [len(v) for v in read_table(default_plan / "train" / "text").values()]
    assert sum(k <= 5 for k in train_digits) > 0.6 * len(train_digits)
    assert sum(k >= 20 for k in train_digits) >= 10


def test_data_prep_missing_fsdd_dir_is_a_clear_error(tmp_path):
    missing = tmp_path / "no_such_fsdd"
    proc = run_script(DATA_PREP, "--fsdd_dir", missing, "--out_dir", tmp_path / "data", check=False)
    assert proc.returncode != 0
    assert str(missing) in proc.stderr and "--fsdd_dir" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_data_prep_rejects_a_recording_that_is_not_8khz_mono(tmp_path):
    fsdd_dir = tmp_path / "recordings"
    fsdd_dir.mkdir()
    sf.write(str(fsdd_dir / "3_alice_0.wav"), np.zeros(1600, dtype=np.int16), 16000, subtype="PCM_16")
    proc = run_script(DATA_PREP, "--fsdd_dir", fsdd_dir, "--out_dir", tmp_path / "data", check=False)
    assert proc.returncode != 0
    assert "3_alice_0.wav" in proc.stderr and "16000 Hz" in proc.stderr


# --------------------------------------------------------------------------- score.py


def write_text(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def run_score(tmp_path: Path, ref: list[str], hyp: list[str], *args: str, check: bool = True):
    return run_script(
        SCORE,
        "--ref", write_text(tmp_path / "ref", ref),
        "--hyp", write_text(tmp_path / "hyp", hyp),
        "--out_dir", tmp_path / "score",
        *args,
        check=check,
    )  # fmt: skip


def test_score_counts_known_edits(tmp_path):
    ref = ["u1 one two three four five", "u2 seven eight", "u3 nine"]
    # u1: two->too, four->for (2 S) and "six" inserted (1 I); u2: "eight" deleted (1 D); u3 correct.
    hyp = ["u1 one too three for five six", "u2 seven", "u3 nine"]
    proc = run_score(tmp_path, ref, hyp, "--name", "mytest")
    result = json.loads((tmp_path / "score" / "result.json").read_text())
    assert (result["wer_sub"], result["wer_del"], result["wer_ins"], result["wer_ref_words"]) == (2, 1, 1, 8)
    assert result["wer"] == pytest.approx(100 * 4 / 8)
    assert result["num_utts"] == 3
    # Characters without spaces: "two"->"too" 1, "four"->"for" 1, "six" 3, "eight" 5 edits.
    assert result["cer_ref_chars"] == len("onetwothreefourfive") + len("seveneight") + len("nine")
    assert result["cer_sub"] + result["cer_del"] + result["cer_ins"] == 10
    assert result["cer"] == pytest.approx(100 * 10 / result["cer_ref_chars"])
    assert proc.stdout.rstrip("\n").splitlines()[-1] == "WER 50.00 % (mytest)"
    result_txt = (tmp_path / "score" / "result.txt").read_text()
    assert result_txt.rstrip("\n").splitlines()[-1] == "WER 50.00 % (mytest)"

    rows = (tmp_path / "score" / "per_utt.tsv").read_text().splitlines()
    assert rows[0].split("\t") == [
        "utt_id", "duration_sec", "ref", "hyp", "num_ref_words", "sub", "del", "ins", "wer"
    ]  # fmt: skip
    by_utt = {row.split("\t")[0]: row.split("\t") for row in rows[1:]}
    assert by_utt["u1"][2:] == [
        "one two three four five", "one too three for five six", "5", "2", "0", "1", "60.00"
    ]  # fmt: skip
    assert by_utt["u2"][4:] == ["2", "0", "1", "0", "50.00"]
    assert by_utt["u3"][4:] == ["1", "0", "0", "0", "0.00"]


def test_score_empty_hypothesis_counts_as_deletions(tmp_path):
    ref = ["a one two three", "b four"]
    hyp = ["a", "b four"]
    proc = run_score(tmp_path, ref, hyp)
    result = json.loads((tmp_path / "score" / "result.json").read_text())
    assert (result["wer_sub"], result["wer_del"], result["wer_ins"], result["wer_ref_words"]) == (0, 3, 0, 4)
    assert result["wer"] == pytest.approx(75.0)
    assert (result["cer_del"], result["cer_ref_chars"]) == (len("onetwothree"), len("onetwothreefour"))
    assert proc.stdout.splitlines()[-1] == "WER 75.00 % (score)"  # name defaults to basename of out_dir


def test_score_breakdown_by_duration_and_by_words(tmp_path):
    ref = ["a one", "b two three", "c four five six", "d seven", "e eight nine"]
    hyp = ["a one", "b two", "c four five six", "d", "e eight nine"]
    durations = ["a 0.5", "b 2.0", "c 3.0", "d 29.999", "e 45"]
    write_text(tmp_path / "utt2dur", durations)
    run_score(tmp_path, ref, hyp, "--utt2dur", str(tmp_path / "utt2dur"))
    result = json.loads((tmp_path / "score" / "result.json").read_text())
    bins = [(b["num_utts"], b["num_words"]) for b in result["by_length"]]
    assert bins == [(1, 1), (1, 2), (1, 3), (1, 1), (1, 2)]
    assert [b["wer"] for b in result["by_length"]] == [0.0, 50.0, 0.0, 100.0, 0.0]

    # Without utt2dur the breakdown is by number of reference words.
    run_score(tmp_path, ref, hyp)
    result = json.loads((tmp_path / "score" / "result.json").read_text())
    assert result["by_length"][0]["num_utts"] == 2  # a and d: one word each
    assert result["by_length"][0]["wer"] == pytest.approx(50.0)
    assert result["by_length"][1]["num_utts"] == 3


def test_score_missing_hypothesis_is_an_error(tmp_path):
    ref = ["u1 one", "u2 two", "u3 three"]
    proc = run_score(tmp_path, ref, ["u1 one", "u3 three"], check=False)
    assert proc.returncode != 0
    assert "u2" in proc.stderr and "incomplete" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "score" / "result.json").exists()


def test_score_hypothesis_not_in_reference_is_an_error(tmp_path):
    proc = run_score(tmp_path, ["u1 one"], ["u1 one", "zz9 two"], check=False)
    assert proc.returncode != 0
    assert "zz9" in proc.stderr
