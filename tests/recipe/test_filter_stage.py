"""run.sh stage 4 lists every utterance it removes and never touches test sets.

Stage 4 runs as users run it (``run.sh --stage 4 --stop_stage 4``) on stage-3
style dump dirs of real FSDD utterances (0.3-5 s), with a duration window that
removes some of them (and a 0.2 s and a 10-digit utterance added to every set).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess

import pytest

from factory import RECIPE_DIR, real_utterances, write_data_dir, write_wav

pytestmark = pytest.mark.slow  # recipe scripts

FS_HZ = 16000
MIN_SEC, MAX_SEC = 0.6, 2.5


def keys(path):
    return [line.split(maxsplit=1)[0] for line in path.read_text().splitlines()]


def durations_sec(data_dir):
    return {u: int(n) / FS_HZ for u, n in (line.split() for line in (data_dir / "utt2num_samples").read_text().splitlines())}


def as_long(path):
    """The file's lines with the utterance renamed to spk-long."""
    return path.read_text().replace("spk-00000", "spk-long")


def digest(folder):
    return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("filter_stage")
    raw = tmp_path / "dump" / "raw"
    # Stage 3's layout: train/dev under org/ (stage 4 writes raw/{train,dev}), test sets directly in raw/.
    for dset, org, start, concat in (("train", "org/train", 500, 2), ("dev", "org/dev", 600, 2), ("test", "test", 700, 2)):
        write_data_dir(raw / org, count=8, start=start, concat=concat)
        # A 0.2 s utterance (short) and a 10-digit one (long) in every set.
        long_dir = write_data_dir(tmp_path / "extra" / dset, count=1, start=start + 50, concat=10)
        short_wav = write_wav(tmp_path / "extra" / dset / "short.wav", real_utterances(1, start=start + 70)[0][: FS_HZ // 5])
        rows = {
            "wav.scp": f"spk-short {short_wav}\n" + as_long(long_dir / "wav.scp"),
            "text": "spk-short one\n" + as_long(long_dir / "text"),
            "utt2num_samples": f"spk-short {FS_HZ // 5}\n" + as_long(long_dir / "utt2num_samples"),
            "utt2spk": "spk-short spk\n" + as_long(long_dir / "utt2spk"),
        }
        for name, text in rows.items():
            with open(raw / org / name, "a") as f:
                f.write(text)
    before = digest(raw / "test")
    cmd = [
        "bash", str(RECIPE_DIR / "run.sh"), "--stage", "4", "--stop_stage", "4",
        "--datadir", str(tmp_path / "data"), "--dumpdir", str(tmp_path / "dump"), "--expdir", str(tmp_path / "exp"),
        "--min_wav_duration", str(MIN_SEC), "--max_wav_duration", str(MAX_SEC),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return tmp_path, out.stdout, before


@pytest.mark.parametrize("dset", ["train", "dev"])
def test_filter_lists_every_removed_utterance_with_its_reason(recipe, dset):
    tmp_path, stdout, _ = recipe
    org, kept_dir = tmp_path / "dump" / "raw" / "org" / dset, tmp_path / "dump" / "raw" / dset
    durations = durations_sec(org)
    outside = {u for u, d in durations.items() if not MIN_SEC <= d <= MAX_SEC}
    assert {"spk-short", "spk-long"} <= outside, "the duration window no longer removes the extreme utterances"
    removed_lines = (kept_dir / "removed_utts.txt").read_text().splitlines()
    removed = [line.split()[0] for line in removed_lines]
    kept = keys(kept_dir / "wav.scp")
    assert sorted(removed) == sorted(outside) and sorted(kept) == sorted(set(durations) - outside)
    for line in removed_lines:
        assert re.fullmatch(r"\S+ (shorter|longer) than [0-9.]+ s \([0-9.]+ s\)", line), line
    assert f"kept {len(kept)} of {len(durations)} utterances of {dset}; removed {len(removed)}" in stdout
    for name in ("text", "utt2num_samples", "utt2spk"):
        assert keys(kept_dir / name) == kept, name


def test_filter_never_touches_the_test_set(recipe):
    tmp_path, stdout, before = recipe
    test_dir = tmp_path / "dump" / "raw" / "test"
    assert digest(test_dir) == before
    outside = [u for u, d in durations_sec(test_dir).items() if not MIN_SEC <= d <= MAX_SEC]
    assert "spk-short" in outside and "spk-long" in outside  # kept, though outside the window
    assert "utterances of test" not in stdout
