"""``python -m espnet_dynres.bin.reestimate_batchnorm``: a trained model's BatchNorm statistics taken
again at its (or another) evaluation frame rate, for raw audio and for extracted features."""

from __future__ import annotations

from pathlib import Path

import kaldiio
import pytest
import soundfile
import torch
import yaml

from espnet2.tasks.asr import ASRTask
from espnet_dynres.asr.batchnorm_reestimate import batchnorm_layers
from espnet_dynres.asr.batchnorm_sample import RestatBudget
from espnet_dynres.bin.reestimate_batchnorm import restat_from_data_dir
from espnet_dynres.bin import reestimate_batchnorm
from factory import TINY_ENCODER_REDUCTION_LENGTH, build_tiny_model, write_data_dir, write_tiny_asr_model
from float_tolerance import assert_close_float32

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """An experiment dir (config.yaml, valid.acc.ave.pth) of a tiny dynres model and a training dir."""
    tmp = tmp_path_factory.mktemp("reestimate")
    config, weights = write_tiny_asr_model(tmp / "exp" / "asr_x", model="token_normalized")
    weights.rename(weights.with_name("valid.acc.ave.pth"))
    train = write_data_dir(tmp / "train", count=5, start=900, concat=2)
    return config.parent, train


def read_wavs(data_dir: Path):
    """Every utterance of ``data_dir/wav.scp`` as the re-estimate reads it: float32 ``(T_samples,)``."""
    lines = (data_dir / "wav.scp").read_text().split("\n")
    return [torch.from_numpy(soundfile.read(line.split()[1], dtype="float32")[0]) for line in lines if line]


def first_batchnorm_inputs(model, wavs):
    """The first BatchNorm layer, the mean per channel of its input over ``wavs`` (each encoded alone in
    eval mode) and the input's largest magnitude."""
    first = batchnorm_layers(model)[0]
    seen = []
    hook = first.register_forward_pre_hook(lambda m, i: seen.append(i[0].transpose(0, 1).flatten(1)))
    model.eval()
    with torch.no_grad():
        for wav in wavs:
            model.encode(wav[None], torch.tensor([wav.shape[0]]))
    hook.remove()
    x = torch.cat(seen, dim=1).double()
    return first, x.mean(dim=1), float(x.abs().max())


def assert_mean_close(layer, mean, peak):
    """The re-estimate (batched) against inputs encoded one at a time: equal up to their float32
    rounding; scale: the inputs' largest magnitude (norm-wise)."""
    assert_close_float32(layer.running_mean, mean, reduction_length=TINY_ENCODER_REDUCTION_LENGTH, scale=peak)


@pytest.mark.parametrize("rate_hz", [None, 80.0])
def test_statistics_are_those_of_the_training_audio_at_the_evaluation_rate(trained, tmp_path, rate_hz):
    exp, train = trained
    out = tmp_path / "asr_x_eval"
    argv = ["--exp_dir", str(exp), "--train_dir", str(train), "--out_dir", str(out)]
    assert reestimate_batchnorm.main(argv + ([] if rate_hz is None else ["--eval_frame_rate_hz", str(rate_hz)])) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["frontend_conf"].get("eval_frame_rate_hz") == rate_hz
    before = torch.load(exp / "valid.acc.ave.pth")
    after = torch.load(out / "valid.acc.ave.pth")
    assert before.keys() == after.keys()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.endswith(("running_mean", "running_var")) for k in changed)  # weights kept
    # The sample (the count budget holds all 5 utterances) is every training utterance at that rate.
    model, _ = ASRTask.build_model_from_file(out / "config.yaml", out / "valid.acc.ave.pth", "cpu")
    wavs = read_wavs(train)
    first, mean, peak = first_batchnorm_inputs(model, wavs)
    assert_mean_close(first, mean, peak)
    # ... and the other rate gives other statistics, far beyond rounding: the rate is what was measured.
    if rate_hz is not None:
        other, _ = ASRTask.build_model_from_file(exp / "config.yaml", out / "valid.acc.ave.pth", "cpu")
        _, mean_standard, _ = first_batchnorm_inputs(other, wavs)
        with pytest.raises(AssertionError, match="not equal up to float32 rounding"):
            assert_close_float32(mean, mean_standard, reduction_length=TINY_ENCODER_REDUCTION_LENGTH, scale=peak)


def test_refusals_name_the_fix(trained, tmp_path):
    exp, train = trained
    base = ["--exp_dir", str(exp), "--train_dir", str(train)]
    with pytest.raises(SystemExit, match="eval_frame_rate_hz=50.0 must lie in"):  # outside the 70-130 Hz clamp
        reestimate_batchnorm.main(base + ["--out_dir", str(tmp_path / "a"), "--eval_frame_rate_hz", "50"])
    assert not (tmp_path / "a" / "config.yaml").exists()
    with pytest.raises(SystemExit, match="--out_dir must differ"):
        reestimate_batchnorm.main(base + ["--out_dir", str(exp)])
    with pytest.raises(SystemExit, match="missing.pth does not exist"):
        reestimate_batchnorm.main(base + ["--out_dir", str(tmp_path / "b"), "--model_file", "missing.pth"])
    stock = tmp_path / "stock"
    write_tiny_asr_model(stock, model="espnet")
    (stock / "model.pth").rename(stock / "valid.acc.ave.pth")
    with pytest.raises(SystemExit, match="needs frontend: dynres"):
        reestimate_batchnorm.main(["--exp_dir", str(stock), "--train_dir", str(train), "--out_dir",
                                   str(tmp_path / "c"), "--eval_frame_rate_hz", "80"])
    model = build_tiny_model(model="token_normalized")
    budget = RestatBudget(max_batch_size=4)
    with pytest.raises(ValueError, match="neither wav.scp nor feats.scp"):
        restat_from_data_dir(model, budget, tmp_path, 2)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "wav.scp").write_text("utt1 /nonexistent/utt1.wav\n")
    with pytest.raises(ValueError, match="cannot read utterance utt1 from /nonexistent/utt1.wav"):
        restat_from_data_dir(model, budget, bad, 2)


def test_extracted_features_are_read_from_feats_scp(tmp_path):
    """A model without a frontend (``speech (B, T_frames, D)``): the sample comes from ``feats.scp``."""
    dim = 20
    model = build_tiny_model(model="token_normalized", frontend=None, input_size=dim, batch_type="numel",
                             encoder_conf=dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=2,
                                               input_layer="conv2d", use_cnn_module=True, cnn_module_kernel=7))
    g = torch.Generator().manual_seed(0)
    feats = {f"utt{i}": torch.randn(30 + 7 * i, dim, generator=g) for i in range(4)}
    data = tmp_path / "train"
    data.mkdir()
    with kaldiio.WriteHelper(f"ark,scp:{data / 'feats.ark'},{data / 'feats.scp'}") as writer:
        for utt, f in feats.items():
            writer(utt, f.numpy())
    # numel budget of 1,000,000 input elements: the sample holds all four sequences
    assert restat_from_data_dir(model, RestatBudget(batch_bins=1000000), data, 2) > 0
    first, mean, peak = first_batchnorm_inputs(model, list(feats.values()))
    assert_mean_close(first, mean, peak)
