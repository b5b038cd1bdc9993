"""espnet_dynres.bin.asr_inference: checked input, and a hypothesis for every utterance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from espnet_dynres.bin import asr_inference
from factory import real_utterances, write_tiny_asr_model, write_wav
from float_tolerance import assert_close_float32

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

FS_HZ = 16000


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    return write_tiny_asr_model(tmp_path_factory.mktemp("model"), token_type="word")


@pytest.fixture(scope="module")
def speech2text(model_files):
    config, weights = model_files
    return asr_inference.Speech2Text(asr_train_config=config, asr_model_file=weights, beam_size=2, ctc_weight=0.3, nbest=2)


@pytest.fixture(scope="module")
def speech():
    return real_utterances(1)[0]  # (T_samples,) float32, 16 kHz


def test_minimum_input_is_the_frontend_window_and_conv2d_subsampling(speech2text):
    # hop 160, conv2d needs 7 frames: 1 + L // 160 >= 7  <=>  L >= 960; n_fft 512 needs L >= 257.
    assert speech2text.min_samples == 960


@pytest.mark.parametrize("num_samples", [0, 100, 800, 959])
def test_too_short_input_gets_an_empty_hypothesis(speech2text, speech, num_samples):
    # ESPnet 202511 raises RuntimeError below n_fft/2 samples and TooShortUttError below 7 frames.
    results = speech2text(speech[:num_samples], utt_id="short")
    assert len(results) == speech2text.nbest
    for text, tokens, token_ids, hyp in results:
        assert (text, tokens, token_ids, hyp.score) == ("", [], [], 0.0)


def test_input_at_the_minimum_is_decoded(speech2text, speech):
    results = speech2text(speech[: speech2text.min_samples])
    assert 1 <= len(results) <= speech2text.nbest
    assert all(isinstance(text, str) for text, *_ in results)


def test_bad_input_is_refused_with_the_utterance_named(speech2text, speech):
    with pytest.raises(ValueError, match=r"utterance u1 is sampled at 8000 Hz, but the model expects 16000 Hz"):
        speech2text(speech, fs_hz=8000, utt_id="u1")
    with pytest.raises(ValueError, match=r"utterance u1 .*2 channels"):
        speech2text(torch.stack([speech, speech], 1), utt_id="u1")
    bad = speech.numpy().copy()
    bad[5] = np.nan
    with pytest.raises(ValueError, match=r"utterance u1 has 1 NaN/inf"):
        speech2text(bad, utt_id="u1")


def decode_dir(tmp_path, model_files, wavs, *extra):
    """Run the CLI on ``{utt: (wav, fs_hz, subtype)}``; returns the output dir."""
    config, weights = model_files
    lines = []
    for utt, (wav, fs_hz, subtype) in sorted(wavs.items()):
        lines.append(f"{utt} {write_wav(tmp_path / 'wav' / f'{utt}.wav', wav, fs_hz, subtype)}\n")
    (tmp_path / "wav.scp").write_text("".join(lines))
    out = tmp_path / "out"
    asr_inference.main([
        "--output_dir", str(out), "--batch_size", "1", "--ngpu", "0", "--beam_size", "2",
        "--data_path_and_name_and_type", f"{tmp_path / 'wav.scp'},speech,sound",
        "--asr_train_config", str(config), "--asr_model_file", str(weights), *extra,
    ])  # fmt: skip
    return out


def test_cli_writes_a_hypothesis_for_every_utterance(tmp_path, model_files, speech):
    wavs = {
        "a-normal": (speech, FS_HZ, "PCM_16"),
        "b-empty": (speech[:0], FS_HZ, "PCM_16"),
        "c-10ms": (speech[:160], FS_HZ, "PCM_16"),
        "d-50ms": (speech[:800], FS_HZ, "PCM_16"),
    }
    out = decode_dir(tmp_path, model_files, wavs)
    lines = (out / "1best_recog" / "text").read_text().splitlines()
    hyps = {line.split(maxsplit=1)[0]: line.split(maxsplit=1)[1:] for line in lines}
    assert sorted(hyps) == sorted(wavs)
    for utt in ("b-empty", "c-10ms", "d-50ms"):
        assert hyps[utt] in ([], [""]), (utt, hyps[utt])


def test_cli_stops_before_decoding_on_a_wrong_rate_naming_the_utterance(tmp_path, model_files, speech):
    wavs = {"a-ok": (speech, FS_HZ, "PCM_16"), "b-8k": (speech[:4000], 8000, "PCM_16")}
    with pytest.raises(ValueError, match=r"utterance b-8k .* 8000 Hz, but the model expects 16000 Hz"):
        decode_dir(tmp_path, model_files, wavs)
    assert not (tmp_path / "out" / "1best_recog").exists()


def test_cli_names_the_utterance_with_nan_samples(tmp_path, model_files, speech):
    bad = speech.clone()
    bad[100] = float("nan")
    wavs = {"a-ok": (speech, FS_HZ, "PCM_16"), "b-nan": (bad, FS_HZ, "FLOAT")}
    with pytest.raises(ValueError, match=r"utterance b-nan has 1 NaN/inf"):
        decode_dir(tmp_path, model_files, wavs)


def test_cli_takes_max_segment_sec_and_restores_espnet_module(tmp_path, model_files, speech):
    from espnet2.bin import asr_inference as espnet_inference

    before = espnet_inference.Speech2Text, espnet_inference.ASRTask
    out = decode_dir(tmp_path, model_files, {"a": (speech, FS_HZ, "PCM_16")}, "--max_segment_sec", "0")
    assert (out / "1best_recog" / "text").read_text().startswith("a")
    assert (espnet_inference.Speech2Text, espnet_inference.ASRTask) == before


def test_a_copied_experiment_folder_decodes_with_its_statistics_beside_the_config(tmp_path, monkeypatch):
    """The config names global_mvn statistics relative to the recipe; export_espnet_config copies them beside
    the experiment's config, and the plugin's decoder finds them there from any directory."""
    import shutil

    import numpy as np

    from espnet_dynres.bin import export_espnet_config
    from factory import write_tiny_asr_model

    recipe = tmp_path / "recipe"
    (recipe / "exp" / "stats").mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(recipe / "exp" / "stats" / "feats_stats.npz", count=np.array(1000.0), sum=rng.normal(size=20) * 1000,
             sum_square=np.full(20, 4000.0))
    monkeypatch.chdir(recipe)
    config, weights = write_tiny_asr_model(recipe / "exp" / "asr_x", token_type="word", normalize="global_mvn",
                                           normalize_conf={"stats_file": "exp/stats/feats_stats.npz"})
    assert export_espnet_config.main(["--exp_dir", "exp/asr_x"]) == 0
    copied = tmp_path / "elsewhere" / "asr_x"
    shutil.copytree(recipe / "exp" / "asr_x", copied)
    monkeypatch.chdir(tmp_path)  # the recipe's relative stats path no longer resolves
    model = asr_inference.CheckedASRTask.build_model_from_file(copied / "config_espnet.yaml", copied / "model.pth")[0]
    want = np.load(recipe / "exp" / "stats" / "feats_stats.npz")
    assert_close_float32(model.normalize.mean, want["sum"] / want["count"], reduction_length=1)  # stored in float32
    (copied / "feats_stats.npz").unlink()
    with pytest.raises(FileNotFoundError, match="export_espnet_config"):
        asr_inference.CheckedASRTask.build_model_from_file(copied / "config.yaml", copied / "model.pth")
