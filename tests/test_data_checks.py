"""Every bad data file or waveform (espnet_dynres.glue.data_checks) gets an error naming the utterance or file and the fix."""

from __future__ import annotations

import re
import types

import pytest
import torch

from espnet_dynres.core.features import check_speech_batch
from espnet_dynres.glue import data_checks as ic
from espnet_dynres.asr.frontend.dynres import DynResFrontend
from factory import RECIPE_FRONTEND, pad_batch, real_utterances, tiny_asr_args, write_wav

FS_HZ = 16000


@pytest.fixture(scope="module")
def speech():
    return real_utterances(1)[0]  # (T_samples,) float32 at 16 kHz


# ------------------------------------------------------------------------------------------- waveforms


def test_stereo_waveform_names_the_utterance_and_the_fix(speech):
    stereo = torch.stack([speech, speech], dim=1)  # (T_samples, 2)
    with pytest.raises(ValueError, match=r"utterance u1 \(a.wav\) .*2 channels.*mono.*sox"):
        ic.check_waveform(stereo, utt_id="u1", source="a.wav")
    ic.check_waveform(speech[:, None], utt_id="u1")  # (T, 1) is mono


@pytest.mark.parametrize("num_samples", [0, 100])
def test_empty_or_shorter_than_one_window(num_samples, speech):
    need = ic.min_input_samples(n_fft=512, hop_length=160)
    with pytest.raises(ValueError, match=rf"utterance u2 has {num_samples} samples; at least {need}.*--min_wav_duration"):
        ic.check_waveform(speech[:num_samples], utt_id="u2", min_samples=need)
    ic.check_waveform(speech[:need], utt_id="u2", min_samples=need)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_or_inf_samples(bad, speech):
    wav = speech.clone()
    wav[10:13] = bad
    with pytest.raises(ValueError, match=r"utterance u3 has 3 NaN/inf samples"):
        ic.check_waveform(wav, utt_id="u3")
    with pytest.raises(ValueError, match="NaN/inf"):
        ic.check_waveform(wav.numpy(), utt_id="u3")


def test_training_batch_with_nan_fails_at_the_frontend(speech):
    frontend = DynResFrontend(n_mels=20, **RECIPE_FRONTEND).train()
    wavs = [speech, speech[:3000].clone()]
    wavs[1][100] = float("nan")
    with pytest.raises(ValueError, match=rf"batch items \[1\] have NaN/inf samples \(lengths \[{len(wavs[1])}\]\)"):
        frontend(*pad_batch(wavs))


def test_batch_with_an_utterance_shorter_than_the_minimum(speech):
    speech_pad, lengths = pad_batch([speech, speech[:200]])
    with pytest.raises(ValueError, match=r"batch items \[1\] have \[200\] samples, fewer than the 257.*--min_wav_duration"):
        check_speech_batch(speech_pad, lengths, min_samples=ic.min_input_samples(512, 160))
    check_speech_batch(speech_pad, lengths, min_samples=200)


# ------------------------------------------------------------------------------------------- audio files


def test_audio_file_unreadable_missing_or_not_audio(tmp_path):
    with pytest.raises(ValueError, match=r"cannot read audio of utterance u4 \(.*missing.wav\)"):
        ic.check_audio_file("u4", str(tmp_path / "missing.wav"))
    (tmp_path / "junk.wav").write_bytes(b"not a wav file" * 10)
    with pytest.raises(ValueError, match=r"cannot read audio of utterance u4 .*junk.wav.*Re-create"):
        ic.check_audio_file("u4", str(tmp_path / "junk.wav"))


def test_truncated_wav_is_named(tmp_path, speech):
    full = write_wav(tmp_path / "full.wav", speech)
    ic.check_audio_file("u5", str(full))
    cut = tmp_path / "cut.wav"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"utterance u5 \(.*cut.wav\) is truncated"):
        ic.check_audio_file("u5", str(cut))


def test_wrong_sampling_rate_and_stereo_file(tmp_path, speech):
    path = write_wav(tmp_path / "8k.wav", speech[:4000], fs_hz=8000)
    with pytest.raises(ValueError, match=r"utterance u6 .* 8000 Hz, but the model expects 16000 Hz.*--fs"):
        ic.check_audio_file("u6", str(path), fs_hz=FS_HZ)
    stereo = write_wav(tmp_path / "st.wav", torch.stack([speech, speech], 1))
    with pytest.raises(ValueError, match=r"utterance u6 .* 2 channels; mono"):
        ic.check_audio_file("u6", str(stereo), fs_hz=FS_HZ)


def test_check_audio_files_reads_every_entry_and_names_missing_keys(tmp_path, speech):
    good = write_wav(tmp_path / "a.wav", speech)
    bad = write_wav(tmp_path / "b.wav", speech[:4000], fs_hz=8000)
    scp = tmp_path / "wav.scp"
    scp.write_text(f"a {good}\nb {bad}\n")
    assert ic.check_audio_files(scp, fs_hz=FS_HZ, keys=["a"]) == 1
    with pytest.raises(ValueError, match="utterance b"):
        ic.check_audio_files(scp, fs_hz=FS_HZ)
    with pytest.raises(ValueError, match=r"1 utterances are not in .*wav.scp, e.g. \['zz'\]"):
        ic.check_audio_files(scp, keys=["a", "zz"])


def test_duplicate_key_in_a_data_file(tmp_path):
    (tmp_path / "text").write_text("a one\nb two\na three\n")
    with pytest.raises(ValueError, match=r"text:3: key a appears twice"):
        ic.read_keyed_file(tmp_path / "text")


# ------------------------------------------------------------------------------------------- data dirs


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_shape_file_keys_missing_from_or_extra_to_the_data(tmp_path):
    shape = write(tmp_path, "speech_shape", ["a 16000", "b 16000", "c 16000"])
    text = write(tmp_path, "text", ["a one", "b two", "c three"])
    ic.check_shape_file_keys([shape], [(text, "text", "text")])
    wav_scp = write(tmp_path, "wav.scp", ["a a.wav", "b b.wav", "d d.wav"])
    with pytest.raises(ValueError) as e:
        ic.check_shape_file_keys([shape], [(text, "text", "text"), (wav_scp, "speech", "sound")])
    msg = str(e.value)
    assert "1 in the shape file only (e.g. ['c']" in msg and "1 in the data file only (e.g. ['d']" in msg
    assert "wav.scp" in msg and "re-run collect-stats" in msg
    only_missing = write(tmp_path, "text_short", ["a one", "b two"])
    with pytest.raises(ValueError) as e:
        ic.check_shape_file_keys([shape], [(only_missing, "text", "text")])
    assert "1 in the shape file only (e.g. ['c']" in str(e.value) and "data file only" not in str(e.value)


def test_shape_file_lengths_shorter_than_the_encoder_input(tmp_path):
    args = tiny_asr_args()
    need = ic.training_min_samples(args)
    assert need == 6 * 160  # conv2d needs 7 frames at a 160-sample hop
    shape = write(tmp_path, "speech_shape", ["a 16000", f"b {need - 1}", "c 0"])
    with pytest.raises(ValueError, match=rf"2 utterances in .*speech_shape have fewer than {need} samples.*'b': {need - 1}.*stage 4"):
        ic.check_shape_file_lengths(shape, min_samples=need)


def test_transcripts_with_no_tokens_are_named_in_a_warning_not_refused(tmp_path, caplog):
    # model: token_normalized documents handling them (empty_transcripts): the check agrees.
    text = write(tmp_path, "text", ["a one", "b", "c   "])
    with caplog.at_level("WARNING"):
        assert ic.check_transcripts(text) == ["b", "c"]
    assert re.search(r"2 transcripts in .*text have no tokens, e.g. \['b', 'c'\]", caplog.text)
    ok = write(tmp_path, "text2", ["a one"])
    assert ic.check_transcripts(ok) == []
    assert ic.check_transcripts(ok, utt2num_tokens={"a": 0}) == ["a"]


@pytest.mark.parametrize("name", ["text", "wav.scp", "speech_shape"])
def test_a_blank_line_in_a_kaldi_style_file_names_the_file_line_and_fix(tmp_path, name):
    path = write(tmp_path, name, ["u0 zero one", "u1 two", "", "u2 three"])
    with pytest.raises(ValueError, match=rf"{name}:3: blank line.*not enough values to unpack.*sed -i"):
        ic.read_keyed_file(path)


def test_multichannel_utterances_are_refused_for_the_dynres_frontend(tmp_path):
    shape = write(tmp_path, "speech_shape", ["u1 16000", "u2 16000,1", "u3 16000,2"])
    with pytest.raises(ValueError, match=r"1 utterances in .*speech_shape have more than one channel.*'u3': '16000,2'.*Down-mix"):
        ic.check_shape_file_channels(shape)


def test_check_training_data_runs_every_check(tmp_path):
    args = tiny_asr_args()
    shape = write(tmp_path, "speech_shape", ["a 16000", "b 16000"])
    text = write(tmp_path, "text", ["a one", "b one", ""])
    options = types.SimpleNamespace(shape_files=[shape], data_path_and_name_and_type=[(text, "text", "text")])
    with pytest.raises(ValueError, match=r"text:3: blank line"):
        ic.check_training_data(args, options)
    options.data_path_and_name_and_type = [(write(tmp_path, "text", ["a one", "b two"]), "text", "text")]
    ic.check_training_data(args, options)
    options.shape_files = [write(tmp_path, "speech_shape", ["a 16000"])]
    with pytest.raises(ValueError, match="list different utterances"):
        ic.check_training_data(args, options)
    options.shape_files = [write(tmp_path, "speech_shape", ["a 16000", "b 16000,2"])]
    with pytest.raises(ValueError, match="more than one channel"):
        ic.check_training_data(args, options)
    args.frontend = "default"  # DefaultFrontend picks a channel itself: not refused
    ic.check_training_data(args, options)


def test_training_audio_at_another_rate_than_the_dynres_frontend_is_named(tmp_path, speech):
    wav = write_wav(tmp_path / "a.wav", speech.numpy()[: FS_HZ // 2], fs_hz=8000)
    scp = write(tmp_path, "wav.scp", [f"a {wav}"])
    args = tiny_asr_args()  # frontend: dynres at 16 kHz
    with pytest.raises(ValueError, match=r"utterance a .* is sampled at 8000 Hz, but the model expects 16000 Hz"):
        ic.check_sampling_rate(args, [(scp, "speech", "sound")])
    args.frontend = "default"  # ESPnet's own frontend: ESPnet's behaviour, not checked here
    ic.check_sampling_rate(args, [(scp, "speech", "sound")])


# ------------------------------------------------------------------------------------------- settings
