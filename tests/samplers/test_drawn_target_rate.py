"""``frontend_conf.target_frame_rate_range_hz``: each training batch aims at a rate drawn from a range,
deterministic in (seed, epoch), inside the budget, with every utterance once; rates no longer follow
duration; validation is unchanged; the audit shows the histogram; the config check refuses it without
``batch_type: dynres``."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from espnet_dynres.batch_audit import rate_histogram
from espnet_dynres.glue.config_checks import check_sampler_arguments
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import write_shape_files, frame_rate

DRAWN = FrameRatePolicy(fs=16000, hop_length=160, target_frame_rate_range_hz=(80.0, 120.0))


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    durations = np.random.default_rng(3).uniform(0.5, 20.0, size=600)
    return write_shape_files(tmp_path_factory.mktemp("shapes"), [int(d * 16000) for d in durations])


def _rates(sampler, utt2samples, epoch):
    rates, durations = [], []
    for batch, frames in zip([b.keys for b in sampler.planned_batches(epoch)], [b.plan.frames for b in sampler.planned_batches(epoch)]):
        for key, t in zip(batch, frames):
            rates.append(frame_rate(sampler.policy, utt2samples[key], t))
            durations.append(utt2samples[key] / 16000)
    return np.array(rates), np.array(durations)


def test_draws_are_deterministic_in_seed_and_epoch_and_inside_the_range():
    a = DRAWN.batch_target_rates_hz(seed=0, epoch=1, num_batches=500)
    assert np.array_equal(a, DRAWN.batch_target_rates_hz(seed=0, epoch=1, num_batches=500))
    assert not np.array_equal(a, DRAWN.batch_target_rates_hz(seed=0, epoch=2, num_batches=500))
    assert not np.array_equal(a, DRAWN.batch_target_rates_hz(seed=1, epoch=1, num_batches=500))
    assert a.min() >= 80.0 and a.max() <= 120.0 and a.max() - a.min() > 35.0
    assert FrameRatePolicy(fs=16000, hop_length=160).batch_target_rates_hz(0, 1, 5) is None


def test_each_batch_gets_one_frame_count_near_its_drawn_rate_within_the_budget(shapes):
    shape_files, utt2samples = shapes
    sampler = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=DRAWN, seed=7)
    again = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=DRAWN, seed=7)
    for epoch in (1, 2):
        batches = [b.keys for b in sampler.planned_batches(epoch)]
        assert sorted(k for b in batches for k in b) == sorted(utt2samples)  # every utterance once
        assert batches == [b.keys for b in again.planned_batches(epoch)]
        assert [b.plan.frames for b in sampler.planned_batches(epoch)] == [b.plan.frames for b in again.planned_batches(epoch)]
        for frames in [b.plan.frames for b in sampler.planned_batches(epoch)]:
            assert len(set(frames)) == 1 and len(frames) * frames[0] <= 4000
    assert [b.keys for b in sampler.planned_batches(1)] != [b.keys for b in sampler.planned_batches(2)]
    other_seed = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=DRAWN, seed=8)
    assert [b.plan.frames for b in other_seed.planned_batches(1)] != [b.plan.frames for b in sampler.planned_batches(1)]


def test_rates_spread_over_the_range_and_stop_following_duration(shapes):
    shape_files, utt2samples = shapes
    plain = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=FrameRatePolicy(fs=16000, hop_length=160))
    drawn = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=DRAWN)
    r0, _ = _rates(plain, utt2samples, 1)
    r1, _ = _rates(drawn, utt2samples, 1)
    # The drawn targets widen the rates well beyond the default's spread around 100 Hz.
    assert np.percentile(r1, 95) - np.percentile(r1, 5) > 1.5 * (np.percentile(r0, 95) - np.percentile(r0, 5))
    assert 90.0 < np.mean(r1) < 110.0
    # Within a batch the default's rate still falls with duration; across the epoch the drawn
    # targets dominate: an utterance's rate tells little about its duration.
    keys = sorted(utt2samples)
    rate_by_key = {}
    for batch, frames in zip([b.keys for b in drawn.planned_batches(1)], [b.plan.frames for b in drawn.planned_batches(1)]):
        for key, t in zip(batch, frames):
            rate_by_key[key] = frame_rate(DRAWN, utt2samples[key], t)
    dur = np.array([utt2samples[k] for k in keys], dtype=float)
    assert abs(np.corrcoef(np.log(dur), [rate_by_key[k] for k in keys])[0, 1]) < 0.3


def test_validation_plans_are_unchanged(shapes):
    shape_files, _ = shapes
    plain = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=FrameRatePolicy(fs=16000, hop_length=160), shuffle=False)
    drawn = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=DRAWN, shuffle=False)
    assert [b.keys for b in drawn.planned_batches(1)] == [b.keys for b in plain.planned_batches(1)]
    assert [b.plan.frames for b in drawn.planned_batches(1)] == [b.plan.frames for b in plain.planned_batches(1)]


def test_without_a_range_the_plan_is_the_default_one(shapes):
    shape_files, _ = shapes
    a = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=FrameRatePolicy(fs=16000, hop_length=160))
    b = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=FrameRatePolicy(fs=16000, hop_length=160, target_frame_rate_range_hz=None))
    assert [b.plan.frames for b in a.planned_batches(3)] == [b.plan.frames for b in b.planned_batches(3)]


def test_rate_histogram_counts_every_utterance_in_ten_hertz_bins():
    h = rate_histogram(np.array([71.0, 79.9, 80.0, 99.5, 100.0, 129.9]))
    assert h == {"70-80": 2, "80-90": 1, "90-100": 1, "100-110": 1, "110-120": 0, "120-130": 1}
    assert rate_histogram(np.array([])) == {}


def test_the_range_needs_the_dynres_sampler():
    args = argparse.Namespace(frontend="dynres", batch_type="numel", frontend_conf={"target_frame_rate_range_hz": [80, 120]})
    with pytest.raises(ValueError, match="target_frame_rate_range_hz.*set batch_type: dynres"):
        check_sampler_arguments(args)


def test_the_frontend_refuses_a_single_number_naming_the_key():
    from espnet_dynres.asr.frontend.dynres import DynResFrontend

    with pytest.raises(ValueError, match=r"target_frame_rate_range_hz must be two rates \[lo, hi\] in Hz, got 90"):
        DynResFrontend(hop_length=160, target_frame_rate_range_hz=90)
    assert DynResFrontend(hop_length=160, target_frame_rate_range_hz=[80, 120]).policy.target_frame_rate_range_hz == (80.0, 120.0)
