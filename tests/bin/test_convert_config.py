"""``convert_config``: a user's ESPnet config (shapes of public recipes' configs, written here as minimal
fixtures) becomes a dynres config in one command: the switches, specaug in seconds, grad_clip for the
per-token loss, a batch_bins from the audit that fits the reference's largest batch; configs it cannot
take are refused with the key named."""

import json

import numpy as np
import pytest
import yaml

from espnet_dynres.bin.convert_config import main
from factory import write_shape_files

# The shape of a LibriSpeech-100 Conformer config (numel, log-mel frontend, SpecAugment with time warp).
LIBRISPEECH_LIKE = {
    "batch_type": "numel", "batch_bins": 400000, "accum_grad": 1, "max_epoch": 70, "num_workers": 1,
    "best_model_criterion": [["valid", "acc", "max"]], "keep_nbest_models": 10,
    "encoder": "conformer", "encoder_conf": {"output_size": 64, "attention_heads": 2, "linear_units": 128,
                                             "num_blocks": 2, "input_layer": "conv2d"},
    "decoder": "transformer", "decoder_conf": {"attention_heads": 2, "linear_units": 128, "num_blocks": 1},
    "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False},
    "frontend_conf": {"n_fft": 512, "win_length": 400, "hop_length": 160},
    "specaug": "specaug",
    "specaug_conf": {"apply_time_warp": True, "time_warp_window": 5, "time_warp_mode": "bicubic",
                     "apply_freq_mask": True, "freq_mask_width_range": [0, 27], "num_freq_mask": 2,
                     "apply_time_mask": True, "time_mask_width_ratio_range": [0.0, 0.05], "num_time_mask": 5},
    "optim": "adam", "optim_conf": {"lr": 0.002}, "scheduler": "warmuplr", "scheduler_conf": {"warmup_steps": 15000},
}
# An older recipe's shape: folded batches of a batch size, no frontend_conf, grad_clip unset.
FOLDED_LIKE = {"batch_type": "folded", "batch_size": 32, "max_epoch": 50, "encoder": "transformer",
               "decoder": "transformer", "model_conf": {"ctc_weight": 0.3}, "specaug": "specaug",
               "specaug_conf": {"apply_time_warp": True, "apply_freq_mask": True, "freq_mask_width_range": [0, 30],
                                "apply_time_mask": True, "time_mask_width_range": [0, 40]}}
LENGTH_LIKE = {"batch_type": "length", "batch_bins": 2000000, "valid_batch_bins": 4000000, "grad_clip": 3,
               "frontend_conf": {"n_fft": 512, "hop_length": 160}, "model_conf": {"ctc_weight": 0.5}}


@pytest.fixture(scope="module")
def stats_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("stats")
    (root / "train").mkdir()
    durations = np.random.default_rng(1).lognormal(np.log(6.0), 0.6, size=400).clip(0.5, 30.0)
    write_shape_files(root / "train", [int(d * 16000) for d in durations], tokens=[int(d * 3) + 1 for d in durations])
    return root


def convert(tmp_path, conf, stats_dir, capsys):
    src = tmp_path / "train_asr.yaml"
    src.write_text(yaml.safe_dump(conf))
    assert main(["--config", str(src), "--stats_dir", str(stats_dir)]) == 0
    out = capsys.readouterr().out
    return yaml.safe_load((tmp_path / "train_asr_dynres.yaml").read_text()), out


@pytest.mark.parametrize("conf", [LIBRISPEECH_LIKE, FOLDED_LIKE, LENGTH_LIKE], ids=["numel", "folded", "length"])
def test_a_recipe_config_becomes_a_dynres_config_with_reasons(tmp_path, stats_dir, capsys, conf):
    new, out = convert(tmp_path, conf, stats_dir, capsys)
    assert (new["batch_type"], new["frontend"], new["model"], new["grad_clip"]) == ("dynres", "dynres",
                                                                                   "token_normalized", 1)
    assert new.get("specaug") == ("dynres" if conf.get("specaug") == "specaug" else conf.get("specaug"))
    assert new.get("specaug_conf") == conf.get("specaug_conf") and new.get("model_conf") == conf.get("model_conf")
    for key in ("encoder", "decoder", "max_epoch", "optim_conf", "encoder_conf"):
        assert new.get(key) == conf.get(key)
    standard_hz = 16000 / (conf.get("frontend_conf") or {}).get("hop_length", 128)  # DefaultFrontend's default hop
    assert (new["frontend_conf"]["min_frame_rate_hz"], new["frontend_conf"]["max_frame_rate_hz"]) == pytest.approx(
        (0.7 * standard_hz, 1.3 * standard_hz))  # 70-130 Hz at 100 Hz
    assert "valid_batch_bins" not in new
    assert isinstance(new["batch_bins"], int) and new["batch_bins"] > 0
    for word in ("frontend: default -> dynres", "grad_clip", "batch_bins", "largest batch"):
        assert word in out


def test_the_budget_is_the_audits_suggestion_and_fits_the_references_largest_batch(tmp_path, stats_dir, capsys):
    new, _ = convert(tmp_path, LIBRISPEECH_LIKE, stats_dir, capsys)
    from espnet_dynres.bin.audit_batches import main as audit

    converted = tmp_path / "train_asr_dynres.yaml"
    assert audit(["--config", str(converted), "--match", str(tmp_path / "train_asr.yaml"), "--speech_shape",
                  str(stats_dir / "train" / "speech_shape"), "--text_shape",
                  str(stats_dir / "train" / "text_shape.word"), "--json", "-"]) == 0
    match = json.loads(capsys.readouterr().out)["match"]
    assert new["batch_bins"] == match["batch_bins"]
    assert match["figures"]["batch_bins"]["max_frames"] <= match["reference_figures"]["max_frames"]


@pytest.mark.parametrize("change, message", [
    ({"batch_type": "dynres"}, "batch_type: dynres cannot be converted"),
    ({"frontend": "s3prl"}, "frontend: s3prl cannot be converted"),
    ({"model": "maskctc"}, "model: maskctc cannot be converted"),
    ({"input_size": 80}, "input_size is set"),
])
def test_configs_it_cannot_take_are_refused_naming_the_key(tmp_path, stats_dir, change, message):
    src = tmp_path / "c.yaml"
    src.write_text(yaml.safe_dump({**LIBRISPEECH_LIKE, **change}))
    with pytest.raises(SystemExit, match=message):
        main(["--config", str(src), "--stats_dir", str(stats_dir)])


def test_a_stats_dir_without_shapes_names_collect_stats(tmp_path):
    src = tmp_path / "c.yaml"
    src.write_text(yaml.safe_dump(LIBRISPEECH_LIKE))
    with pytest.raises(SystemExit, match="speech_shape not found.*stage 10"):
        main(["--config", str(src), "--stats_dir", str(tmp_path)])


def test_a_budget_the_clamp_never_reaches_is_lowered_to_one_that_binds(tmp_path, stats_dir, capsys):
    """A numel budget whose mean audio per step no dynres batch can hold (the clamp closes batches
    first): the suggestion is the fullest batch the clamp allows, said so, and training's numel-sized
    warning does not fire on it."""
    from espnet_dynres.samplers.batch_bins_search import numel_sized_budget
    from espnet_dynres.bin.audit_batches import build_policy, parse_args
    from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler

    new, out = convert(tmp_path, {**LIBRISPEECH_LIKE, "batch_bins": 400000000}, stats_dir, capsys)
    assert "not reachable" in out
    shapes = [str(stats_dir / "train" / "speech_shape"), str(stats_dir / "train" / "text_shape.word")]
    policy = build_policy(parse_args(["--config", str(tmp_path / "train_asr_dynres.yaml"), "--speech_shape", shapes[0]]))
    sampler = DynResBatchSampler(batch_bins=new["batch_bins"], shape_files=shapes, policy=policy)
    assert numel_sized_budget(sampler, shapes) is None
    fullest = max(len(f) * max(f) for f in [b.plan.frames for b in sampler.planned_batches(1)])
    assert fullest >= 0.5 * new["batch_bins"]
