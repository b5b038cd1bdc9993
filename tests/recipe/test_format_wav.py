"""local/format_wav.py (stage 3) stops on a bad recording with the utterance named, and keeps empty ones."""

from __future__ import annotations

import sys

import pytest
import soundfile as sf
import torch

from factory import RECIPE_DIR, load_script, real_utterances, write_wav

pytestmark = pytest.mark.slow  # recipe scripts

SCRIPT = RECIPE_DIR / "local" / "format_wav.py"


@pytest.fixture(scope="module")
def format_wav():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def speech():
    return real_utterances(1, fs_hz=8000)[0]  # (T_samples,) float32 at 8 kHz, as FSDD


def run(format_wav, monkeypatch, src, dst):
    monkeypatch.setattr(sys, "argv", ["format_wav.py", "--src", str(src), "--dst", str(dst), "--fs", "16k"])
    format_wav.main()


def data_dir(tmp_path, wavs):
    """``{utt: path}`` -> a data dir with wav.scp and text."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "wav.scp").write_text("".join(f"{u} {p}\n" for u, p in sorted(wavs.items())))
    (src / "text").write_text("".join(f"{u} one\n" for u in sorted(wavs)))
    return src


def test_empty_recording_is_kept_empty(tmp_path, monkeypatch, format_wav, speech):
    wavs = {"a": write_wav(tmp_path / "a.wav", speech, 8000), "b": write_wav(tmp_path / "b.wav", speech[:0], 8000)}
    run(format_wav, monkeypatch, data_dir(tmp_path, wavs), tmp_path / "dst")
    lengths = dict(line.split() for line in (tmp_path / "dst" / "utt2num_samples").read_text().splitlines())
    assert lengths["b"] == "0" and int(lengths["a"]) == 2 * len(speech)
    assert sf.info(str(tmp_path / "dst" / "data" / "b.wav")).frames == 0


def bad_file(kind, tmp_path, speech):
    if kind == "stereo":
        return write_wav(tmp_path / "x.wav", torch.stack([speech, speech], 1), 8000), "2 channels"
    if kind == "nan":
        wav = speech.clone()
        wav[3] = float("nan")
        return write_wav(tmp_path / "x.wav", wav, 8000, subtype="FLOAT"), "NaN/inf"
    if kind == "truncated":
        full = write_wav(tmp_path / "full.wav", speech, 8000)
        (tmp_path / "x.wav").write_bytes(full.read_bytes()[:1000])
        return tmp_path / "x.wav", "truncated"
    (tmp_path / "x.wav").write_bytes(b"RIFF....garbage")
    return tmp_path / "x.wav", "cannot read audio"


@pytest.mark.parametrize("kind", ["stereo", "nan", "truncated", "unreadable"])
def test_bad_recording_stops_stage_3_naming_the_utterance(tmp_path, monkeypatch, format_wav, speech, kind):
    path, what = bad_file(kind, tmp_path, speech)
    wavs = {"a-ok": write_wav(tmp_path / "a.wav", speech, 8000), "b-bad": path}
    with pytest.raises(SystemExit) as e:
        run(format_wav, monkeypatch, data_dir(tmp_path, wavs), tmp_path / "dst")
    message = str(e.value.code)
    assert message.startswith("format_wav.py: ") and "b-bad" in message and str(path) in message
    assert what in message
