"""local/tempo_perturb.py (``run.sh --test_tempo``): duration divided by the tempo, pitch kept."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from factory import RECIPE_DIR, fsdd_files, load_script

pytestmark = pytest.mark.slow  # recipe scripts

SCRIPT = RECIPE_DIR / "local" / "tempo_perturb.py"
FS_HZ = 8000


def peak_hz(wav: np.ndarray, fs_hz: int) -> float:
    spectrum = np.abs(np.fft.rfft(wav * np.hanning(len(wav))))
    return float(np.fft.rfftfreq(len(wav), 1 / fs_hz)[np.argmax(spectrum)])


@pytest.mark.parametrize("tempo", [0.8, 0.9, 1.1, 1.25])
def test_duration_follows_the_tempo_and_the_pitch_stays(tempo):
    tp = load_script(SCRIPT)
    t = np.arange(2 * FS_HZ) / FS_HZ
    tone = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    out = tp.tempo_change(tone, FS_HZ, tempo)
    assert out.dtype == np.float32 and len(out) == round(len(tone) / tempo)
    middle = out[len(out) // 4: 3 * len(out) // 4]
    assert abs(peak_hz(middle, FS_HZ) - 440.0) < 8.0  # the pitch is kept (a resampling would move it by the tempo)
    assert 0.3 < np.sqrt(np.mean(middle ** 2)) / np.sqrt(np.mean(tone ** 2)) < 1.5  # no silence, no blow-up


def test_identity_tempo_keeps_real_speech_close():
    tp = load_script(SCRIPT)
    wav, fs_hz = sf.read(str(fsdd_files(1, start=5)[0]), dtype="float32")
    out = tp.tempo_change(wav, fs_hz, 1.0)
    assert len(out) == len(wav)
    assert np.corrcoef(out, wav)[0, 1] > 0.9


def test_a_test_set_is_copied_with_its_references_and_new_durations(tmp_path):
    tp = load_script(SCRIPT)
    src = tmp_path / "test"
    src.mkdir()
    files = fsdd_files(3, start=20)
    (src / "wav.scp").write_text("".join(f"u{i} {f}\n" for i, f in enumerate(files)))
    (src / "text").write_text("".join(f"u{i} {f.name.split('_')[0]}\n" for i, f in enumerate(files)))
    (src / "utt2spk").write_text("".join(f"u{i} s\n" for i in range(3)))
    dst = tmp_path / "test_tempo1.25"
    assert tp.main(["--src", str(src), "--dst", str(dst), "--tempo", "1.25"]) == 0
    assert (dst / "text").read_text() == (src / "text").read_text()
    assert (dst / "utt2spk").read_text() == (src / "utt2spk").read_text()
    durations = dict(line.split() for line in (dst / "utt2dur").read_text().splitlines())
    for line in (dst / "wav.scp").read_text().splitlines():
        utt, path = line.split()
        original = sf.info(str(files[int(utt[1:])]))
        new = sf.info(path)
        assert new.samplerate == original.samplerate
        assert new.frames == round(original.frames / 1.25)
        assert float(durations[utt]) == pytest.approx(new.frames / new.samplerate, abs=1e-3)


def test_bad_input_is_named(tmp_path):
    tp = load_script(SCRIPT)
    src = tmp_path / "test"
    src.mkdir()
    (src / "wav.scp").write_text(f"u0 {tmp_path / 'missing.wav'}\n")
    with pytest.raises(SystemExit, match="utterance u0: no audio file"):
        tp.main(["--src", str(src), "--dst", str(tmp_path / "out"), "--tempo", "0.9"])
    with pytest.raises(SystemExit):
        tp.main(["--src", str(src), "--dst", str(tmp_path / "out"), "--tempo", "0"])
    with pytest.raises(ValueError, match="tempo must be > 0"):
        tp.tempo_change(np.zeros(800, dtype=np.float32), FS_HZ, -1.0)


def test_run_sh_test_tempo_adds_formatted_test_sets(tmp_path):
    """``./run.sh --test_tempo 0.8,1.25`` stages 1-3: each tempo is a test set of the same utterances
    in the dump, as long as the test set divided by its tempo."""
    import subprocess

    common = ["--num_train", "4", "--num_dev", "2", "--num_test", "3", "--datadir", str(tmp_path / "data"),
              "--dumpdir", str(tmp_path / "dump"), "--expdir", str(tmp_path / "exp")]
    done = subprocess.run(["bash", str(RECIPE_DIR / "run.sh"), "--stage", "1", "--stop_stage", "3",
                           "--test_tempo", "0.8,1.25", *common], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    def samples(d):
        return dict((k, int(v)) for k, v in (line.split() for line in (d / "utt2num_samples").read_text().splitlines()))

    test = samples(tmp_path / "dump" / "raw" / "test")
    for tempo in (0.8, 1.25):
        changed = samples(tmp_path / "dump" / "raw" / f"test_tempo{tempo}")
        assert changed.keys() == test.keys()
        assert all(abs(changed[k] - test[k] / tempo) <= 2 * 16000 / 8000 for k in test)  # 16 kHz from 8 kHz
        assert (tmp_path / "data" / f"test_tempo{tempo}" / "utt2dur").is_file()
    bad = subprocess.run(["bash", str(RECIPE_DIR / "run.sh"), "--stage", "1", "--stop_stage", "1",
                          "--test_tempo", "fast", *common], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--test_tempo takes positive numbers" in bad.stderr
