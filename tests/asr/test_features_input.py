"""Extracted features as input (``frontend: null``, ``speech (B, T_frames, D)``): both models train,
validate and decode, and the BatchNorm re-estimate keeps feature sequences; the dynres switches,
which need raw audio, are refused before training."""

from __future__ import annotations

from pathlib import Path

import kaldiio
import numpy as np
import pytest
import torch
import torchaudio
import yaml

from espnet2.tasks.asr import ASRTask
from espnet_dynres.asr.batchnorm_sample import RestatBudget
from factory import (
    DIGIT_WORDS, REPO_ROOT, TINY_ENCODER_REDUCTION_LENGTH, TOKENS, build_tiny_model,
    build_tiny_model_and_reestimate, fsdd_files, random_text,
    real_utterances, training_data_args, write_rows,
)
from float_tolerance import assert_close_float32

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

CI_CONFIG = REPO_ROOT / "conf" / "train_asr_conformer_dynres_ci.yaml"

FEAT_DIM = 20
TRANSFORMER = dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=2, input_layer="conv2d")
CONFORMER = dict(TRANSFORMER, use_cnn_module=True, cnn_module_kernel=7)


def feature_model(model: str, encoder: str):
    return build_tiny_model_and_reestimate(model=model, frontend=None, input_size=FEAT_DIM, batch_type="numel",
                            encoder=encoder, encoder_conf=CONFORMER if encoder == "conformer" else TRANSFORMER,
                            model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=8))


@pytest.mark.parametrize("model_name", ["dynres", "token_normalized"])
@pytest.mark.parametrize("encoder", ["conformer", "transformer"])
def test_features_train_and_evaluate(model_name, encoder):
    """ESPnet's own test style: no frontend, speech (B, T_frames, D); forward, backward, eval()."""
    model, reestimate = feature_model(model_name, encoder)
    assert model.frontend is None
    torch.manual_seed(0)
    feats = torch.randn(2, 40, FEAT_DIM)
    lengths = torch.tensor([40, 40])  # equal: the re-estimate's padding-free batch cuts nothing
    text, text_lengths = random_text(2, 3)
    model.train()
    with reestimate.collecting(model):
        loss, stats, weight = model(feats, lengths, text, text_lengths)
    loss.backward()
    assert torch.isfinite(loss) and "below_clamp" not in stats
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    assert (len(reestimate.sample) == 2) == (encoder == "conformer") == bool(bns)
    assert reestimate.run(model) == len(bns)  # re-estimates over the kept feature sequences (Conformer)
    with torch.no_grad():
        loss_eval, _, _ = model(feats, lengths, text, text_lengths)
    assert torch.isfinite(loss_eval)
    if encoder == "conformer":
        # The statistics are those of the features as evaluation encodes them, one at a time.
        inputs = {bn: [] for bn in bns}
        hooks = [bn.register_forward_pre_hook(lambda m, i: inputs[m].append(i[0].transpose(0, 1).flatten(1)))
                 for bn in bns]
        with torch.no_grad():
            for b in range(2):
                model.encode(feats[b : b + 1, : lengths[b]], lengths[b : b + 1])
        for h in hooks:
            h.remove()
        for bn, xs in inputs.items():
            # batched re-estimate against one at a time: equal up to float32 rounding (norm-wise scale)
            x = torch.cat(xs, dim=1).double()
            assert_close_float32(bn.running_mean, x.mean(dim=1), reduction_length=TINY_ENCODER_REDUCTION_LENGTH,
                                 scale=float(x.abs().max()))
        assert reestimate.budget == RestatBudget(batch_bins=1000000, max_batch_size=None)


@pytest.mark.parametrize("switch", [dict(batch_type="dynres"), dict(frontend="dynres"), dict(valid_batch_type="dynres")])
def test_dynres_switches_with_features_are_refused_with_the_fix(switch):
    overrides = dict(model="token_normalized", frontend=None, input_size=FEAT_DIM, batch_type="numel")
    overrides.update(switch)
    with pytest.raises(ValueError, match=r"input_size: 20 means extracted features.*batch_type: numel"):
        build_tiny_model(**overrides)


def write_feature_dir(out_dir: Path, count: int, start: int) -> Path:
    """A data dir of Kaldi fbank features (``feats.scp`` + ark, ``(T_frames, FEAT_DIM)``) of real digits."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = fsdd_files(count, start)
    wavs = real_utterances(count, start=start)
    rows = {"text": [], "speech_shape": [], "text_shape.word": []}
    with kaldiio.WriteHelper(f"ark,scp:{out_dir / 'feats.ark'},{out_dir / 'feats.scp'}") as writer:
        for i, (f, wav) in enumerate(zip(files, wavs)):
            utt = f"spk-{i:05d}"
            feats = torchaudio.compliance.kaldi.fbank(wav[None] * 32768, num_mel_bins=FEAT_DIM, sample_frequency=16000)
            writer(utt, feats.numpy())
            rows["text"].append(f"{utt} {DIGIT_WORDS[int(f.name.split('_')[0])]}")
            rows["speech_shape"].append(f"{utt} {feats.shape[0]},{FEAT_DIM}")
            rows["text_shape.word"].append(f"{utt} 1,{len(TOKENS)}")
    return write_rows(out_dir, rows)


def train_on_features(tmp_path: Path, *extra: str) -> Path:
    train, valid = write_feature_dir(tmp_path / "train", 6, 500), write_feature_dir(tmp_path / "valid", 2, 520)
    out = tmp_path / "exp"
    ASRTask.main(cmd=[
        "--config", str(CI_CONFIG), "--output_dir", str(out), "--ngpu", "0", "--num_workers", "0",
        "--input_size", str(FEAT_DIM), "--batch_type", "numel", "--batch_bins", str(40 * FEAT_DIM * 3),
        "--specaug", "none", "--normalize", "none",
        *training_data_args(train, valid, speech="feats.scp,speech,kaldi_ark"),
        "--use_tensorboard", "false", *extra,
    ])  # fmt: skip
    return out


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["token_normalized", "dynres"])
def test_asr_task_trains_validates_and_decodes_extracted_features(tmp_path, caplog, model_name):
    """``--input_size`` with Kaldi features: ESPnet builds no frontend; both models with a Conformer
    (BatchNorm) train an epoch, validate after the re-estimate, and decode."""
    from espnet2.bin.asr_inference import Speech2Text

    with caplog.at_level("INFO"):  # ESPnet drops --frontend: input_size is set
        out = train_on_features(tmp_path, "--frontend", "default", "--model", model_name)
    assert "BatchNorm statistics of 1 layers re-estimated" in caplog.text
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["frontend"] is None and config["input_size"] == FEAT_DIM
    speech2text = Speech2Text(asr_train_config=str(out / "config.yaml"), asr_model_file=str(out / "1epoch.pth"),
                              beam_size=2, ctc_weight=0.3, nbest=1)
    feats = kaldiio.load_scp(str(tmp_path / "valid" / "feats.scp"))
    for utt in feats:
        results = speech2text(torch.from_numpy(np.array(feats[utt])))  # (T_frames, D)
        assert len(results) == 1 and isinstance(results[0][0], str)


def test_asr_task_refuses_frontend_dynres_with_features(tmp_path):
    with pytest.raises(ValueError, match="frontend: dynres computes features"):
        train_on_features(tmp_path, "--frontend", "dynres")
