"""Every bad setting (espnet_dynres.glue.config_checks) gets an error naming the key and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from espnet2.tasks.asr import ASRTask
from espnet_dynres.glue import config_checks as cc
from espnet_dynres.asr.frontend.dynres import DynResFrontend
from factory import build_tiny_model, tiny_asr_args

FS_HZ = 16000


def parse(*argv):
    return ASRTask.get_parser().parse_args(["--output_dir", "x", "--token_list", "t", *argv])


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--frontend", "dynres", "--frontend_conf", "min_frame_rate=60"], r"frontend_conf has an unknown key 'min_frame_rate' for DynResFrontend; did you mean 'min_frame_rate_hz'\?"),
        (["--model", "token_normalized", "--model_conf", "ctc_wieght=0.3"], r"model_conf has an unknown key 'ctc_wieght' for TokenNormalizedASRModel; did you mean 'ctc_weight'\?"),
        (["--encoder", "conformer", "--encoder_conf", "num_block=2"], r"did you mean 'num_blocks'\?"),
        (["--model", "dynres", "--model_conf", "batchnorm_restat_utts=128"], r"model_conf key 'batchnorm_restat_utts' was replaced by 'batchnorm_restat_batches': .*no longer a count of utterances"),
    ],
)
def test_conf_typos_get_the_closest_valid_key(argv, match):
    with pytest.raises(TypeError, match=match):
        cc.check_task_conf_keys(ASRTask, parse(*argv))


def test_conf_key_check_runs_before_the_model_is_built():
    args = tiny_asr_args(frontend_conf={"n_mels": 20, "max_frame_rate": 120})
    build = cc.with_conf_key_check(ASRTask.build_model.__func__)
    with pytest.raises(TypeError, match="did you mean 'max_frame_rate_hz'"):
        build(ASRTask, args)
    assert build(ASRTask, tiny_asr_args()) is not None  # valid settings still build
    cc.check_task_conf_keys(ASRTask, parse("--frontend", "dynres", "--model", "token_normalized"))


@pytest.mark.parametrize("grad_clip, setting", [(5.0, "5"), (0.0, "off"), (-1.0, "off"), (1.5, "1.5")])
def test_token_normalized_grad_clip_above_one_or_off_is_warned_about(grad_clip, setting):
    args = tiny_asr_args(grad_clip=grad_clip)
    with pytest.warns(cc.GradClipWarning, match=rf"grad_clip {setting}: .*Set grad_clip: 1"):
        assert cc.check_token_normalized_grad_clip(args)


@pytest.mark.parametrize(
    "overrides",
    [dict(grad_clip=1.0), dict(grad_clip=0.5), dict(model="espnet", grad_clip=5.0),
     dict(grad_clip=5.0, collect_stats=True)],
    ids=["clip1", "clip0.5", "espnet-model", "collect-stats"],
)
def test_grad_clip_check_is_silent_where_the_rule_holds_or_does_not_apply(overrides):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", cc.GradClipWarning)
        assert not cc.check_token_normalized_grad_clip(tiny_asr_args(**overrides))


def test_grad_clip_check_runs_when_espnet_builds_the_model():
    import espnet_dynres  # noqa: F401  (the registered ASRTask.build_model is the wrapped one)

    with pytest.warns(cc.GradClipWarning):
        ASRTask.build_model(tiny_asr_args(grad_clip=5.0))


@pytest.mark.parametrize(
    "conf, match",
    [
        (dict(min_frame_rate_hz=140.0, max_frame_rate_hz=130.0), "min_frame_rate_hz=140.*Fix frontend_conf"),
        (dict(min_frame_rate_hz=70.0, fallback_frame_rate_hz=80.0), r"fallback_frame_rate_hz=80.*min_frame_rate_hz=70.*Fix frontend_conf"),
    ],
)
def test_invalid_rate_clamp_in_frontend_conf(conf, match):
    with pytest.raises(ValueError, match=match):
        DynResFrontend(**conf)


def test_feats_stats_of_another_dimension_fails_at_model_build(tmp_path):
    stats = tmp_path / "feats_stats.npz"
    np.savez(stats, count=np.array(100), sum=np.zeros(40), sum_square=np.full(40, 100.0))
    with pytest.raises(ValueError, match=r"feats_stats.npz holds statistics of 40-dimensional features, but the frontend gives 20.*re-run collect-stats"):
        build_tiny_model(normalize="global_mvn", normalize_conf={"stats_file": str(stats)})
    np.savez(stats, count=np.array(100), sum=np.zeros(20), sum_square=np.full(20, 100.0))
    build_tiny_model(normalize="global_mvn", normalize_conf={"stats_file": str(stats)})


def test_the_dynres_sampler_without_the_dynres_frontend_names_the_switch_not_a_key():
    import argparse

    from espnet_dynres.glue.config_checks import check_frontend_pairing

    args = argparse.Namespace(batch_type="dynres", frontend="default", input_size=None,
                              frontend_conf={"min_frame_rate_hz": 70})
    with pytest.raises(ValueError, match="batch_type: dynres plans a frame rate .* got frontend: default. Set "
                                         "frontend: dynres"):
        check_frontend_pairing(args)


def test_stock_specaug_in_frames_beside_the_dynres_frontend_warns():
    import argparse
    import warnings

    from espnet_dynres.glue.config_checks import SpecAugFrameRateWarning, check_frontend_pairing

    def warned(conf):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            check_frontend_pairing(argparse.Namespace(batch_type="dynres", frontend="dynres", specaug="specaug",
                                                      specaug_conf=conf))
        return [w for w in seen if issubclass(w.category, SpecAugFrameRateWarning)]

    assert warned({}) and "apply_time_warp" in str(warned({})[0].message)  # ESPnet's default warps in frames
    assert warned({"apply_time_warp": False, "time_mask_width_range": [0, 40]})
    assert not warned({"apply_time_warp": False, "time_mask_width_ratio_range": [0.0, 0.05]})  # fractions
