"""The frame-rate lever's control configs: ESPnet's frontend at a fixed 80 Hz with the re-estimate
(conf/ablation/train_asr_conformer_numel_80hz_cpu.yaml), and the 80 Hz dynres arm evaluated at 80 Hz.

The control arm of the frame-rate lever must run at 80 Hz in training *and* evaluation (the config is
the one decoding reads), hold the same audio per step as the 100 Hz numel arm, and carry the plugin's
BatchNorm re-estimate; otherwise it must equal the 100 Hz numel arm.
"""

import torch
import yaml
import pytest
from factory import RECIPE_DIR, TOKENS, pad_batch, random_text, real_utterances

pytestmark = pytest.mark.slow  # recipe scripts

CONF = RECIPE_DIR / "conf"
FIXED = CONF / "ablation" / "train_asr_conformer_numel_80hz_cpu.yaml"
NUMEL = CONF / "train_asr_conformer_numel_cpu.yaml"


def test_differs_from_the_100hz_numel_arm_only_in_the_rate_and_the_model():
    fixed, numel = (yaml.safe_load(p.read_text()) for p in (FIXED, NUMEL))
    assert fixed.pop("frontend_conf") == {**numel.pop("frontend_conf"), "hop_length": 200}
    assert (fixed.pop("model"), numel.pop("model")) == ("dynres", "espnet")
    assert fixed.pop("log_interval") and numel.pop("log_interval")
    assert fixed == numel  # batch_type, batch_bins (samples: the same audio per step), specaug, optimisation


def test_builds_an_80hz_model_whose_reestimate_runs_before_validation():
    from espnet2.tasks.asr import ASRTask

    import espnet_dynres  # noqa: F401  (registers model: dynres)
    from espnet_dynres.asr.dynres_model import DynResASRModel
    from espnet_dynres.glue.trainer import DynResTrainer

    parser = ASRTask.get_parser()
    args = parser.parse_args(["--config", str(FIXED), "--token_list", "none", "--output_dir", "unused"])
    args.token_list, args.input_size, args.normalize = list(TOKENS), None, None
    args.frontend_conf = {**args.frontend_conf, "fs": 16000}
    torch.manual_seed(0)
    model = ASRTask.build_model(args)
    reestimate = DynResTrainer.build_options(args).batchnorm_reestimate
    assert isinstance(model, DynResASRModel) and ASRTask.trainer is DynResTrainer
    speech, lengths = pad_batch(real_utterances(2, concat=2))
    model.eval()
    with torch.no_grad():
        feats, feat_lengths = model.frontend(speech, lengths)
    assert feat_lengths.tolist() == [1 + n // 200 for n in lengths.tolist()]  # 80 Hz at 16 kHz, at evaluation too
    model.train()
    text, text_lengths = random_text(2, 5)
    with reestimate.collecting(model):
        loss, _, _ = model(speech, lengths, text, text_lengths)
    loss.backward()
    assert len(reestimate.sample) == 2  # the training step fed the re-estimate's sample
    before = [m.running_mean.clone() for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    reestimate.run(model)  # before validation: BatchNorm statistics at 80 Hz, the evaluation rate
    after = [m.running_mean for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    assert before and not all(torch.equal(a, b) for a, b in zip(after, before))
    assert len(reestimate.sample) == 0


def test_the_80hz_arm_evaluated_at_80hz_differs_only_in_its_evaluation_rate():
    base = yaml.safe_load((CONF / "ablation" / "train_asr_conformer_dynres_80hz_cpu.yaml").read_text())
    eval80 = yaml.safe_load((CONF / "ablation" / "train_asr_conformer_dynres_80hz_eval80_cpu.yaml").read_text())
    assert eval80["frontend_conf"].pop("eval_frame_rate_hz") == 80
    assert eval80 == base
