"""local/speed_perturb.py (``run.sh --speed_perturb_factors``, ``--test_speed``): pitch and tempo moved
together, ESPnet's ``sp<f>-`` ids, copies in the training set only."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import soundfile as sf

from factory import RECIPE_DIR, fsdd_files, load_script

pytestmark = pytest.mark.slow  # recipe scripts

SCRIPT = RECIPE_DIR / "local" / "speed_perturb.py"
FS_HZ = 8000


def peak_hz(wav: np.ndarray, fs_hz: int) -> float:
    spectrum = np.abs(np.fft.rfft(wav * np.hanning(len(wav))))
    return float(np.fft.rfftfreq(len(wav), 1 / fs_hz)[np.argmax(spectrum)])


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_moves_duration_and_pitch_together(factor):
    sp = load_script(SCRIPT)
    t = np.arange(2 * FS_HZ) / FS_HZ
    tone = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    out = sp.speed_change(tone, FS_HZ, factor)
    assert out.dtype == np.float32 and abs(len(out) - len(tone) / factor) <= 1
    middle = out[len(out) // 4: 3 * len(out) // 4]
    assert abs(peak_hz(middle, FS_HZ) - 440.0 * factor) < 5.0  # SoX's speed: the pitch moves with the tempo
    assert 0.8 < np.sqrt(np.mean(middle ** 2)) / np.sqrt(np.mean(tone ** 2)) < 1.2


def test_factor_one_is_the_original():
    sp = load_script(SCRIPT)
    wav, fs_hz = sf.read(str(fsdd_files(1, start=5)[0]), dtype="float32")
    assert np.array_equal(sp.speed_change(wav, fs_hz, 1.0), wav)
    with pytest.raises(ValueError, match="speed factor must be > 0"):
        sp.speed_change(wav, fs_hz, 0.0)


def _data_dir(tmp_path, n=3):
    src = tmp_path / "train"
    src.mkdir()
    files = fsdd_files(n, start=20)
    (src / "wav.scp").write_text("".join(f"u{i} {f}\n" for i, f in enumerate(files)))
    (src / "text").write_text("".join(f"u{i} {f.name.split('_')[0]}\n" for i, f in enumerate(files)))
    (src / "utt2spk").write_text("".join(f"u{i} s{i % 2}\n" for i in range(n)))
    return src, files


def test_training_copies_get_espnet_ids_and_durations(tmp_path):
    sp = load_script(SCRIPT)
    src, files = _data_dir(tmp_path)
    dst = tmp_path / "train_sp"
    assert sp.main(["--src", str(src), "--dst", str(dst), "--factors", "0.9", "1.0", "1.1"]) == 0
    scp = dict(line.split() for line in (dst / "wav.scp").read_text().splitlines())
    assert sorted(scp) == sorted(f"{p}u{i}" for p in ("", "sp0.9-", "sp1.1-") for i in range(3))
    text = dict(line.split(maxsplit=1) for line in (dst / "text").read_text().splitlines())
    spk = dict(line.split() for line in (dst / "utt2spk").read_text().splitlines())
    for i, f in enumerate(files):
        n = sf.info(str(f)).frames
        assert scp[f"u{i}"] == str(f.resolve()) and spk[f"u{i}"] == f"s{i % 2}"
        for factor in (0.9, 1.1):
            utt = f"sp{factor}-u{i}"
            assert text[utt] == text[f"u{i}"] and spk[utt] == f"sp{factor}-s{i % 2}"
            info = sf.info(scp[utt])
            assert info.samplerate == FS_HZ and abs(info.frames - n / factor) <= 1
    spk2utt = dict(line.split(maxsplit=1) for line in (dst / "spk2utt").read_text().splitlines())
    assert sorted(u for us in spk2utt.values() for u in us.split()) == sorted(scp)


def test_a_test_copy_keeps_its_ids_and_bad_input_is_named(tmp_path):
    sp = load_script(SCRIPT)
    src, _ = _data_dir(tmp_path, n=2)
    dst = tmp_path / "test_speed0.9"
    assert sp.main(["--src", str(src), "--dst", str(dst), "--factors", "0.9", "--keep_ids"]) == 0
    assert (dst / "text").read_text() == (src / "text").read_text()
    with pytest.raises(SystemExit):
        sp.main(["--src", str(src), "--dst", str(tmp_path / "x"), "--factors", "0.9", "1.1", "--keep_ids"])
    (src / "wav.scp").write_text(f"u0 {tmp_path / 'missing.wav'}\nu1 {tmp_path / 'missing.wav'}\n")
    with pytest.raises(SystemExit, match=r"cannot read audio of utterance u0 \("):
        sp.main(["--src", str(src), "--dst", str(tmp_path / "y"), "--factors", "1.1"])


@pytest.mark.slow
def test_run_sh_speed_perturbs_the_training_set_only(tmp_path):
    """``./run.sh --speed_perturb_factors "0.9 1.0 1.1" --test_speed 0.9`` stages 1-5 and 10 on the recipe's
    small subset: train_sp holds the originals and the sp0.9-/sp1.1- copies at 1/0.9 and 1/1.1 of their
    durations, the token list and the stats (in asr_stats_raw_word_sp) come from it, dev and test are the
    same as without speed perturbation, and test_speed0.9 is the test set slowed down."""
    common = ["--num_train", "4", "--num_dev", "2", "--num_test", "3", "--dumpdir", str(tmp_path / "dump"),
              "--expdir", str(tmp_path / "exp"), "--asr_config", "conf/train_asr_conformer_dynres_ci.yaml"]
    plain = subprocess.run(["bash", str(RECIPE_DIR / "run.sh"), "--stage", "1", "--stop_stage", "4",
                            "--datadir", str(tmp_path / "data0"), "--dumpdir", str(tmp_path / "dump0"),
                            *common[:6]], capture_output=True, text=True, timeout=600)
    assert plain.returncode == 0, (plain.stdout + plain.stderr)[-3000:]
    done = subprocess.run(["bash", str(RECIPE_DIR / "run.sh"), "--stage", "1", "--stop_stage", "10",
                           "--datadir", str(tmp_path / "data"), "--speed_perturb_factors", "0.9 1.0 1.1",
                           "--test_speed", "0.9", *common], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    def samples(d):
        return dict((k, int(v)) for k, v in (line.split() for line in (d / "utt2num_samples").read_text().splitlines()))

    raw, raw0 = tmp_path / "dump" / "raw", tmp_path / "dump0" / "raw"
    train, train_sp = samples(raw0 / "train"), samples(raw / "train_sp")
    assert sorted(train_sp) == sorted(f"{p}{u}" for p in ("", "sp0.9-", "sp1.1-") for u in train)
    for u, n in train.items():
        assert train_sp[u] == n
        for factor in (0.9, 1.1):  # 8 kHz -> 16 kHz after the change: a sample at 8 kHz is 2 here
            assert abs(train_sp[f"sp{factor}-{u}"] - n / factor) <= 4
    for dset in ("dev", "test"):
        assert samples(raw / dset) == samples(raw0 / dset)
        assert (raw / dset / "text").read_text() == (raw0 / dset / "text").read_text()
    slowed = samples(raw / "test_speed0.9")
    assert slowed.keys() == samples(raw / "test").keys()
    assert all(abs(slowed[k] - n / 0.9) <= 4 for k, n in samples(raw / "test").items())
    stats = tmp_path / "exp" / "asr_stats_raw_word_sp" / "train"
    shapes = dict(line.split() for line in (stats / "speech_shape").read_text().splitlines())
    assert sorted(shapes) == sorted(train_sp) and (stats / "feats_stats.npz").is_file()
    assert not (tmp_path / "exp" / "asr_stats_raw_word").exists()
    bad = subprocess.run(["bash", str(RECIPE_DIR / "run.sh"), "--stage", "1", "--stop_stage", "1",
                          "--speed_perturb_factors", "0.9,1.1", *common], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--speed_perturb_factors takes positive numbers" in bad.stderr
