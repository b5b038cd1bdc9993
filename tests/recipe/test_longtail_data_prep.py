"""Tests of the recipe's long-tailed corpus, ``local/longtail_data_prep.py`` (``./run.sh --corpus longtail``).

The corpus must have the shape of call-centre audio scaled down: lognormal durations, median about
20 s, from about 3 s to at least 3 minutes, the longest 5 % above a minute, 2-3 hours of training
audio, one speaker per utterance. Planning (``--no_audio``) checks the shape of the full-size
corpus; a small corpus with audio checks that the audio is what the plan says. The tests read the
shared FSDD recordings (they fail, not skip, when those are missing).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from factory import FSDD_DIR, RECIPE_DIR, load_script

pytestmark = pytest.mark.slow  # recipe scripts

SCRIPT = RECIPE_DIR / "local" / "longtail_data_prep.py"


def prep(out_dir: Path, *args: str) -> Path:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--fsdd_dir", str(FSDD_DIR), "--out_dir", str(out_dir), *args],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out_dir


def durations(set_dir: Path) -> list[float]:
    return [float(line.split()[1]) for line in (set_dir / "utt2dur").read_text().splitlines()]


@pytest.fixture(scope="module")
def full_plan(tmp_path_factory) -> Path:
    return prep(tmp_path_factory.mktemp("longtail_plan"), "--no_audio")


def test_default_corpus_has_the_long_tailed_shape(full_plan):
    train = durations(full_plan / "train")
    assert 2.0 <= sum(train) / 3600 <= 3.0, sum(train) / 3600
    assert 17.0 <= statistics.median(train) <= 23.0
    assert min(train) >= 3.0 and min(train) <= 4.0
    assert max(train) >= 180.0
    assert sum(d > 60.0 for d in train) / len(train) >= 0.05  # the longest 5 % above a minute
    # Lognormal: log-durations are symmetric about the log-median (skewness near 0, not the raw durations').
    logs = np.log(train)
    skew = float(np.mean((logs - logs.mean()) ** 3) / logs.std() ** 3)
    assert abs(skew) < 0.3, skew
    for name in ("dev", "test"):
        other = durations(full_plan / name)
        assert abs(statistics.median(other) - statistics.median(train)) < 3.0
        assert max(other) > 60.0 and min(other) < 6.0


def test_every_utterance_is_one_speaker_and_its_digits(full_plan):
    module = load_script(RECIPE_DIR / "local" / "data_prep.py")
    for name in ("train", "dev", "test"):
        spk = dict(line.split() for line in (full_plan / name / "utt2spk").read_text().splitlines())
        text = {k: v.split() for k, v in (line.split(" ", 1) for line in (full_plan / name / "text").read_text().splitlines())}
        for line in (full_plan / name / "utt2sources").read_text().splitlines():
            utt, *sources = line.split()
            digits, speakers, takes = zip(*(s[: -len(".wav")].split("_") for s in sources))
            assert set(speakers) == {spk[utt]}, utt
            assert {int(t) for t in takes} <= set(module.SET_TAKES[name]), utt
            assert text[utt] == [module.DIGIT_WORDS[int(d)] for d in digits], utt


def test_same_seed_same_bytes_and_seed_changes_only_the_fill(tmp_path):
    a = prep(tmp_path / "a", "--no_audio", "--num_train", "40", "--num_dev", "4", "--num_test", "4")
    b = prep(tmp_path / "b", "--no_audio", "--num_train", "40", "--num_dev", "4", "--num_test", "4")
    c = prep(tmp_path / "c", "--no_audio", "--num_train", "40", "--num_dev", "4", "--num_test", "4", "--seed", "1")
    for name in ("text", "utt2dur", "utt2sources"):
        assert (a / "train" / name).read_bytes() == (b / "train" / name).read_bytes()
    assert (a / "train" / "text").read_bytes() != (c / "train" / "text").read_bytes()
    # The seed decides the fill, not the shape: the same quantile targets, reached within one digit and pause.
    da, dc = sorted(durations(a / "train")), sorted(durations(c / "train"))
    assert max(abs(x - y) for x, y in zip(da, dc)) < 2.5


def test_audio_has_the_planned_length_and_starts_with_its_first_source(tmp_path):
    out = prep(tmp_path / "lt", "--num_train", "3", "--num_dev", "1", "--num_test", "1", "--median_sec", "6")
    planned = dict(line.split() for line in (out / "train" / "utt2dur").read_text().splitlines())
    sources = {l.split()[0]: l.split()[1:] for l in (out / "train" / "utt2sources").read_text().splitlines()}
    for line in (out / "train" / "wav.scp").read_text().splitlines():
        utt, path = line.split()
        audio, rate = sf.read(path, dtype="int16")
        assert rate == 8000 and audio.ndim == 1
        assert abs(len(audio) / rate - float(planned[utt])) < 1e-3
        first, _ = sf.read(str(FSDD_DIR / sources[utt][0]), dtype="int16")
        assert any(np.array_equal(audio[i : i + len(first)], first) for i in range(0, 2001))  # after <= 0.25 s lead


def test_bad_shape_arguments_are_clear_errors(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out_dir", str(tmp_path), "--min_sec", "30", "--median_sec", "20", "--no_audio"],
        capture_output=True, text=True,
    )
    assert proc.returncode != 0 and "--min_sec <= --median_sec" in proc.stderr
