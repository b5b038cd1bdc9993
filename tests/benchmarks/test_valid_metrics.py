"""benchmarks/valid_metrics.py: the same figures for the same weights, whatever the model's batch weight."""


import pytest
import torch

from factory import REPO_ROOT, load_script, write_data_dir, write_tiny_asr_model
from float_tolerance import assert_close_float32

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

SCRIPT = REPO_ROOT / "benchmarks" / "valid_metrics.py"


def load():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("valid_metrics")
    data = write_data_dir(tmp / "dev", count=5, start=700, concat=2)
    models = {}
    for name in ("token_normalized", "espnet"):
        config, weights = write_tiny_asr_model(tmp / name, model=name, token_type="word", use_preprocessor=True)
        models[name] = (config, weights)
    # Same weights in both: copy token_normalized's state into the espnet checkpoint.
    torch.save(torch.load(models["token_normalized"][1]), models["espnet"][1])
    return data, models


def test_figures_do_not_depend_on_the_models_batch_weight(setup):
    vm = load()
    data, models = setup
    tn = vm.evaluate(models["token_normalized"][1], data, models["token_normalized"][0])
    stock = vm.evaluate(models["espnet"][1], data, models["espnet"][0])
    assert tn["utterances"] == stock["utterances"] == 5
    # the same weights run through the same operations (the frontends' eval paths are ESPnet's Stft + LogMel):
    # the same argmaxes, counted in the same order
    for key in ("acc_token", "acc_utt", "ter_ctc_token", "ter_ctc_utt"):
        assert tn[key] == stock[key], key
    assert 0.0 <= tn["acc_token"] <= 1.0 and tn["ter_ctc_token"] >= 0.0


def test_epochs_mode_evaluates_every_epoch_checkpoint(setup, tmp_path):
    vm = load()
    data, models = setup
    epochs = tmp_path / "epochs"
    epochs.mkdir()
    for e in (1, 2, 10):
        (epochs / f"{e}epoch.pth").write_bytes(models["token_normalized"][1].read_bytes())
    (epochs / "config.yaml").write_bytes(models["token_normalized"][0].read_bytes())
    out = tmp_path / "r.json"
    assert vm.main(["--valid_dir", str(data), "--epochs", f"arm={epochs}", "--json", str(out)]) == 0
    import json

    result = json.loads(out.read_text())
    assert list(result) == ["arm@1", "arm@2", "arm@10"]


def test_attention_loss_per_target_is_the_same_for_both_batch_weights(setup):
    vm = load()
    data, models = setup
    tn = vm.evaluate(models["token_normalized"][1], data, models["token_normalized"][0])
    stock = vm.evaluate(models["espnet"][1], data, models["espnet"][0])
    # the same float32 target sums, one model's divided by the target count (float32) and multiplied back
    # (float64): two roundings of a non-negative loss per utterance
    assert_close_float32(tn["att_loss_target"], stock["att_loss_target"], reduction_length=2)
    assert tn["att_loss_target"] > 0.0 and 0.0 <= tn["eos_prediction_share"] <= 1.0
    assert tn["eos_prediction_share"] == stock["eos_prediction_share"]


def test_attention_loss_per_target_matches_the_models_own_loss(setup):
    """The stock model's ``loss_att`` at batch size 1 is the target sum; divided by U + 1 targets."""
    vm = load()
    data, models = setup
    from espnet2.tasks.asr import ASRTask

    model, train_args = ASRTask.build_model_from_file(models["espnet"][0], models["espnet"][1], "cpu")
    model.eval()
    total = targets = 0.0
    with torch.no_grad():
        for _keys, batch in vm.speech_text_iterator(train_args, data, batch_size=1):
            batch = {k: v for k, v in batch.items() if not k.endswith("utt_id")}
            _, stats, _ = model(**batch)
            total += float(stats["loss_att"])
            targets += float(batch["text_lengths"].sum()) + 1.0
    # the model's forward computes the same loss_att as evaluate (the same operations), summed in the same order
    assert vm.evaluate(models["espnet"][1], data, models["espnet"][0])["att_loss_target"] == total / targets


def test_restat_gives_every_model_the_plugins_statistics(setup, tmp_path):
    """--restat_train_dir: ESPnet's model and the plugin's, same weights, same re-estimate, same figures."""
    from espnet2.tasks.asr import ASRTask
    from torch.nn.modules.batchnorm import _BatchNorm

    vm = load()
    data, models = setup
    train = write_data_dir(tmp_path / "train", count=6, start=800, concat=2)
    stats = {}
    for name, (config, weights) in models.items():
        model, train_args = ASRTask.build_model_from_file(config, weights, "cpu")
        before = [m.running_var.clone() for m in model.modules() if isinstance(m, _BatchNorm)]
        assert vm.restat_batchnorm(model, train_args, train, 4) == len(before) > 0
        after = [m.running_var for m in model.modules() if isinstance(m, _BatchNorm)]
        assert all(not torch.allclose(a, b) for a, b in zip(after, before))
        stats[name] = after
    for a, b in zip(stats["espnet"], stats["token_normalized"]):
        assert torch.equal(a, b)  # the same sample through the same operations
    tn = vm.evaluate(models["token_normalized"][1], data, models["token_normalized"][0], train, 4)
    stock = vm.evaluate(models["espnet"][1], data, models["espnet"][0], train, 4)
    assert tn["acc_token"] == stock["acc_token"]


def test_restat_names_a_malformed_wav_scp_line(setup, tmp_path):
    from espnet2.tasks.asr import ASRTask

    vm = load()
    _data, models = setup
    bad = tmp_path / "train"
    bad.mkdir()
    (bad / "wav.scp").write_text("utt_without_path\n", encoding="utf-8")
    model, train_args = ASRTask.build_model_from_file(models["espnet"][0], models["espnet"][1], "cpu")
    with pytest.raises(ValueError, match="utt_without_path.*fix or remove that line"):
        vm.restat_batchnorm(model, train_args, bad, 4)


def test_accuracy_by_position_adds_up_to_the_token_accuracy(setup):
    vm = load()
    data, models = setup
    r = vm.evaluate(models["token_normalized"][1], data, models["token_normalized"][0])
    cells = r["acc_by_position"]
    assert list(cells)[0] == "1"  # ordered by position
    correct = sum(c["acc"] * c["targets"] for c in cells.values())
    targets = sum(c["targets"] for c in cells.values())
    assert cells["1"]["targets"] == r["utterances"]  # every utterance has a first target (<eos> at least)
    assert correct / targets == pytest.approx(r["acc_token"], abs=1e-9)


def test_position_bins_cover_every_position_once():
    vm = load()
    assert [vm.position_bin(p) for p in (1, 2, 3, 4, 5, 6, 10, 11, 20, 21, 500)] == [
        "1", "2", "3", "4-5", "4-5", "6-10", "6-10", "11-20", "11-20", "21+", "21+"]
    with pytest.raises(ValueError):
        vm.position_bin(0)
