"""Invariants of ``batch_type: dynres`` over random duration lists (hypothesis)."""

import collections

import numpy as np

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.core.batch_planner import BatchKind
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import RECIPE_FRONTEND, plan_of, write_shape_files, common_frame_count, frame_range, standard_count

POLICY = FrameRatePolicy(fs=16000, hop_length=160)
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
durations_sec = st.lists(st.floats(min_value=0.05, max_value=120.0), min_size=1, max_size=150)


def build(tmp_path, durations, **kwargs):
    shape_files, utt2samples = write_shape_files(tmp_path, [int(d * 16000) for d in durations])
    return DynResBatchSampler(shape_files=shape_files, policy=POLICY, **kwargs), utt2samples


def lone_frames(num_samples, batch_bins):
    """What the class docstring promises for a lone utterance over the budget."""
    rule = standard_count(POLICY, num_samples)
    lowest = frame_range(POLICY, num_samples, POLICY.fallback_frame_rate_hz)[0]
    return rule if rule <= batch_bins else max(lowest, batch_bins)


@FAST
@given(durations=durations_sec, batch_bins=st.integers(50, 20000), epoch=st.integers(1, 6), seed=st.integers(0, 9),
       batch_fill=st.sampled_from(["nearest", "below"]))
def test_each_utterance_once_per_epoch_and_budget_kept(tmp_path, durations, batch_bins, epoch, seed, batch_fill):
    sampler, utt2samples = build(tmp_path, durations, batch_bins=batch_bins, seed=seed, batch_fill=batch_fill)
    batches, frames = [b.keys for b in sampler.planned_batches(epoch)], [b.plan.num_frames for b in sampler.planned_batches(epoch)]
    kinds = [b.plan.kind for b in sampler.planned_batches(epoch)]
    counts = collections.Counter(k for batch in batches for k in batch)
    assert set(counts) == set(utt2samples) and set(counts.values()) == {1}
    for batch, planned, kind in zip(batches, frames, kinds):
        lengths = [utt2samples[k] for k in batch]
        assert planned is not None  # min_batch_size=1: every batch has a common T
        if len(batch) == 1:
            assert planned == lone_frames(lengths[0], batch_bins)
            rule = standard_count(POLICY, lengths[0])
            assert kind == (BatchKind.RULE if planned == rule else BatchKind.LOWERED)
            continue
        rule = common_frame_count(POLICY, lengths)
        if len(batch) * rule <= batch_bins:
            assert planned == rule and kind == BatchKind.RULE
        else:  # rule (e): joined nearest to the budget, T lowered to it inside every member's clamp
            assert batch_fill == "nearest" and planned == batch_bins // len(batch) and kind == BatchKind.LOWERED
            assert all(frame_range(POLICY, n)[0] <= planned for n in lengths)
        assert len(batch) * planned <= batch_bins  # hard budget: only a lone utterance may exceed it


def test_nearest_fill_joins_an_utterance_that_overshoots_less_than_the_room_left(tmp_path):
    # 36.0 s and 36.5 s: 3,601 + 3,651 standard frames; a budget of 7,200 leaves 3,599 frames of room
    # beside the first, and the second overshoots by 52 at the rule's T (3,626): one batch at
    # T = 3,600 (100.0 and 98.6 Hz), not two half-empty steps.  The 10 s clip shares no frame count
    # with them inside the 70-130 Hz clamp and stays alone.
    durations = [36.0, 36.5, 10.0]
    sampler, _ = build(tmp_path, durations, batch_bins=7200, shuffle_jitter=0.0, batch_fill="nearest")
    assert sorted(map(len, [b.keys for b in sampler.planned_batches(1)])) == [1, 2]
    assert sorted([b.plan.num_frames for b in sampler.planned_batches(1)]) == [1001, 3600]
    old, _ = build(tmp_path, durations, batch_bins=7200, shuffle_jitter=0.0)  # default: below
    assert sorted(map(len, [b.keys for b in old.planned_batches(1)])) == [1, 1, 1]


def test_nearest_fill_lifts_the_underfilled_steps_of_long_form_audio(tmp_path):
    # Long-form durations (5-40 s): closing below the budget leaves a step that ends before a long
    # utterance with up to half the budget empty; closing nearest to it fills those steps (the
    # recipe's corpus, audit CLI: 5th percentile of audio per step 52.7 s -> 59.6 s, numel 60.5 s).
    rng = np.random.default_rng(0)
    durations = rng.uniform(5.0, 40.0, size=400).tolist()
    audio, fill = {}, {}
    for mode in ("nearest", "below"):
        sampler, utt2samples = build(tmp_path, durations, batch_bins=8000, batch_fill=mode)
        batches, frames = [b.keys for b in sampler.planned_batches(1)], [b.plan.num_frames for b in sampler.planned_batches(1)]
        audio[mode] = np.array([sum(utt2samples[k] for k in b) / 16000 for b in batches])
        fill[mode] = np.mean([len(b) * t / 8000 for b, t in zip(batches, frames)])
    assert np.percentile(audio["nearest"], 5) > 1.1 * np.percentile(audio["below"], 5)
    assert fill["nearest"] > fill["below"] + 0.05
    assert audio["nearest"].sum() == pytest.approx(audio["below"].sum())  # the same utterances


@FAST
@given(durations=st.lists(st.floats(1.0, 1.8), min_size=40, max_size=120), batch_bins=st.integers(1000, 3000),
       seed=st.integers(0, 9))
def test_same_seed_and_epoch_same_batches_other_epoch_other_batches(tmp_path, durations, batch_bins, seed):
    # Durations within the clamp's 130/70 ratio, so any two utterances may share a batch and the
    # partition is free to change (with forced groups, e.g. 0.5 s next to 1 s clips, it may not).
    a, _ = build(tmp_path, durations, batch_bins=batch_bins, seed=seed)
    b, _ = build(tmp_path, durations, batch_bins=batch_bins, seed=seed)
    assert [b.keys for b in a.planned_batches(3)] == [b.keys for b in b.planned_batches(3)]
    assert [b.plan.frames for b in a.planned_batches(3)] == [b.plan.frames for b in b.planned_batches(3)]
    # A fresh draw each epoch: 40+ utterances in >= 3 budget-limited batches.
    composition = [set(map(frozenset, [b.keys for b in a.planned_batches(e)])) for e in (1, 2, 3, 4)]
    assert len({frozenset(c) for c in composition}) > 1


@FAST
@given(durations=durations_sec, batch_bins=st.integers(50, 20000), world_size=st.sampled_from([2, 3]),
       epoch=st.integers(1, 4))
def test_ddp_min_batch_size(tmp_path, durations, batch_bins, world_size, epoch):
    sampler, utt2samples = build(tmp_path, durations, batch_bins=batch_bins, min_batch_size=world_size)
    batches = [b.keys for b in sampler.planned_batches(epoch)]
    assert sorted(k for b in batches for k in b) == sorted(utt2samples)
    if len(utt2samples) >= world_size:
        assert min(len(b) for b in batches) >= world_size  # every rank gets >= 1 utterance
    for batch, planned in zip(batches, [b.plan.num_frames for b in sampler.planned_batches(epoch)]):
        if planned is not None and len(batch) * planned > batch_bins:
            assert len(batch) < 2 * world_size  # only forced batches (<= 1 utterance per rank + leftovers)


def test_validation_batches_are_fixed_and_sorted(tmp_path):
    sampler, utt2samples = build(tmp_path, [0.5 + 0.1 * i for i in range(60)], batch_bins=1500, shuffle=False)
    assert [b.keys for b in sampler.planned_batches(1)] == [b.keys for b in sampler.planned_batches(2)]
    assert set([b.plan.kind for b in sampler.planned_batches(1)]) == {BatchKind.STANDARD}
    longest = [max(utt2samples[k] for k in b) for b in [b.keys for b in sampler.planned_batches(1)]]
    assert longest == sorted(longest)


def test_validation_batches_keep_the_budget_at_their_padded_standard_rate_cost(tmp_path):
    # 400 lognormal durations (median 3 s), batch_bins 3000 (1.32x over the budget before the fix).
    import numpy as np

    durations = np.exp(np.random.default_rng(0).normal(np.log(3.0), 0.8, 400)).clip(0.2, 25.0).tolist()
    sampler, utt2samples = build(tmp_path, durations, batch_bins=3000, shuffle=False)
    batches = [b.keys for b in sampler.planned_batches(1)]
    assert sorted(k for b in batches for k in b) == sorted(utt2samples)
    for batch, padded in zip(batches, [b.plan.num_frames for b in sampler.planned_batches(1)]):
        std = [standard_count(POLICY, utt2samples[k]) for k in batch]
        assert padded == max(std)
        assert len(batch) * padded <= 3000 or (len(batch) == 1 and padded > 3000)
    assert max(len(b) for b in batches) > 1  # it does batch


def test_max_batch_size(tmp_path):
    sampler, _ = build(tmp_path, [1.0] * 50, batch_bins=100000, max_batch_size=7)
    assert max(len(b) for b in [b.keys for b in sampler.planned_batches(1)]) == 7
    with pytest.raises(ValueError, match="max_batch_size"):
        build(tmp_path, [1.0], batch_bins=100, max_batch_size=1, min_batch_size=2)


def test_oversized_utterance_is_lowered_then_warned_or_refused(tmp_path, caplog):
    # 60 s: 6001 standard frames; at 50 Hz 3001.
    sampler, _ = build(tmp_path, [60.0, 1.0], batch_bins=4000)
    assert sorted([b.plan.num_frames for b in sampler.planned_batches(1)]) == [101, 4000]  # lowered to the budget, no warning needed
    assert "utt000000" not in caplog.text
    sampler, _ = build(tmp_path, [60.0, 1.0], batch_bins=2000)
    assert 3001 in [b.plan.num_frames for b in sampler.planned_batches(1)] and "utt000000" in caplog.text
    with pytest.raises(ValueError, match="utt000000.*batch_bins=2000"):
        build(tmp_path, [60.0, 1.0], batch_bins=2000, oversized="error")


def test_frontend_computes_the_planned_frames(tmp_path):
    # A long-tailed corpus, 0.2 s to 30 s, plus one oversized recording lowered to the budget.
    durations = [0.2 * 1.03**i for i in range(170)] + [90.0]
    sampler, utt2samples = build(tmp_path, durations, batch_bins=4000)
    frontend = DynResFrontend(**RECIPE_FRONTEND).train()
    checked = 0
    for batch, per_utt in zip([b.keys for b in sampler.planned_batches(2)], [b.plan.frames for b in sampler.planned_batches(2)]):
        if sum(utt2samples[k] for k in batch) > 16000 * 15 and len(batch) > 1:
            continue  # keep the test fast: the frame counts matter, not the audio
        lengths = torch.tensor([utt2samples[k] for k in batch])
        speech = torch.randn(len(batch), int(lengths.max())) * 0.1
        feats, feats_lengths = frontend(speech, lengths, plan_of(per_utt))
        assert feats_lengths.tolist() == list(per_utt)
        assert feats.shape[1] == per_utt[0]
        checked += 1
    assert checked > 10 and sum(b.plan.kind is BatchKind.PADDED for b in sampler.planned_batches(2)) == 0
    assert len(sampler) < len(durations)  # it does batch


@FAST
@given(durations=durations_sec, batch_bins=st.integers(200, 20000), target_hz=st.sampled_from([70.0, 80.0, 90.0]))
def test_a_lower_target_rate_keeps_coverage_budget_and_ctc_minimum(tmp_path, durations, batch_bins, target_hz):
    policy = FrameRatePolicy(fs=16000, hop_length=160, target_frame_rate_hz=target_hz)
    shape_files, utt2samples = write_shape_files(tmp_path, [int(d * 16000) for d in durations])
    # A dense transcript for every third utterance: 0.9 x its standard frames are needed.
    need = {k: max(1, int(0.9 * standard_count(POLICY, n))) if i % 3 == 0 else 1
            for i, (k, n) in enumerate(sorted(utt2samples.items()))}
    sampler = DynResBatchSampler(batch_bins=batch_bins, shape_files=shape_files, policy=policy, utt2min_frames=need)
    batches, per_utt = [b.keys for b in sampler.planned_batches(2)], [b.plan.frames for b in sampler.planned_batches(2)]
    counts = collections.Counter(k for batch in batches for k in batch)
    assert set(counts) == set(utt2samples) and set(counts.values()) == {1}
    for batch, frames in zip(batches, per_utt):
        for k, t in zip(batch, frames):
            lo, hi = frame_range(policy, utt2samples[k], policy.fallback_frame_rate_hz)
            assert lo <= t <= hi  # a rate the frontend can produce
            assert t >= min(need[k], hi), (k, t, need[k])  # CTC minimum wherever the clamp reaches it
        if len(batch) > 1:
            assert len(batch) * frames[0] <= batch_bins


def test_a_lower_target_rate_costs_fewer_frames_for_the_same_batches(tmp_path):
    durations = [1.0 + 0.01 * i for i in range(200)]  # all within the clamp's ratio
    shape_files, utt2samples = write_shape_files(tmp_path, [int(d * 16000) for d in durations])
    std = DynResBatchSampler(batch_bins=100000, shape_files=shape_files, policy=POLICY, max_batch_size=10)
    low = DynResBatchSampler(batch_bins=100000, shape_files=shape_files, policy=FrameRatePolicy(fs=16000, hop_length=160, target_frame_rate_hz=80.0),
                             max_batch_size=10)
    assert [b.keys for b in std.planned_batches(1)] == [b.keys for b in low.planned_batches(1)]  # max_batch_size decides the grouping
    frames_std = sum(len(b) * t for b, t in zip([b.keys for b in std.planned_batches(1)], [b.plan.num_frames for b in std.planned_batches(1)]))
    frames_low = sum(len(b) * t for b, t in zip([b.keys for b in low.planned_batches(1)], [b.plan.num_frames for b in low.planned_batches(1)]))
    assert frames_low / frames_std == pytest.approx(0.8, abs=0.01)


long_tailed_sec = st.lists(
    st.one_of(st.floats(0.5, 15.0), st.floats(15.0, 480.0)), min_size=1, max_size=120
)  # call-centre-like: many short utterances, a long tail up to 8 minutes


def lowest_frames(num_samples):
    """Fewest frames the rules allow an utterance: its frame count at fallback_frame_rate_hz."""
    return frame_range(POLICY, num_samples, POLICY.fallback_frame_rate_hz)[0]


@FAST
@given(durations=long_tailed_sec, batch_bins=st.integers(2000, 60000), world_size=st.integers(1, 3),
       epoch=st.integers(1, 4), seed=st.integers(0, 5))
def test_ddp_budget_holds_unless_an_utterance_cannot_meet_its_share(tmp_path, durations, batch_bins, world_size,
                                                                    epoch, seed):
    sampler, utt2samples = build(tmp_path, durations, batch_bins=batch_bins, min_batch_size=world_size, seed=seed)
    batches, per_utt = [b.keys for b in sampler.planned_batches(epoch)], [b.plan.frames for b in sampler.planned_batches(epoch)]
    assert sorted(k for b in batches for k in b) == sorted(utt2samples)  # each utterance once
    for planned, kind in zip([b.plan.num_frames for b in sampler.planned_batches(epoch)], [b.plan.kind for b in sampler.planned_batches(epoch)]):
        assert (planned is None) == (kind == BatchKind.PADDED)  # the kind says what the plan is
    for batch, frames in zip(batches, per_utt):
        if len(utt2samples) >= world_size:
            assert len(batch) >= world_size  # every rank gets an utterance
        for k, t in zip(batch, frames):  # a frame count the frontend can produce, never the 100 Hz padding
            lo, hi = frame_range(POLICY, utt2samples[k], POLICY.fallback_frame_rate_hz)
            assert lo <= t <= hi
        cost = len(batch) * max(frames)
        if cost > batch_bins:
            # Over budget only because a member cannot meet its share even in the smallest legal batch:
            # world_size utterances, or the epoch's last < 2 x world_size, which cannot be split.
            worst = max(lowest_frames(utt2samples[k]) for k in batch)
            tail = world_size < len(batch) < 2 * world_size
            assert worst * (len(batch) if tail else world_size) > batch_bins, (batch, frames, batch_bins)
            assert max(frames) == worst  # and then at the lowest cost the rules allow


def test_a_ddp_forced_long_batch_is_computed_at_the_lowest_rates(tmp_path, caplog):
    durations = [7.1, 223.1, 33.9, 39.3]
    sampler, utt2samples = build(tmp_path, durations, batch_bins=12000, min_batch_size=2)
    with caplog.at_level("WARNING"):
        [b.keys for b in sampler.planned_batches(1)]
    batches, per_utt = [b.keys for b in sampler.planned_batches(1)], [b.plan.frames for b in sampler.planned_batches(1)]
    long_key = "utt000001"
    (batch, frames), = [(b, f) for b, f in zip(batches, per_utt) if long_key in b]
    assert max(frames) == lowest_frames(utt2samples[long_key]) == 11156  # 223.1 s at 50 Hz
    assert len(batch) * max(frames) < 44622 / 1.9  # was 2 x 22,311 at 100 Hz
    assert all(len(b) * max(f) <= 12000 for b, f in zip(batches, per_utt) if long_key not in b)
    assert caplog.text.count(long_key) == 1  # named once
    with pytest.raises(ValueError, match=r"utt000001 \(223.1 s\) needs 11156 frames even at 50 Hz; in a batch of 2"):
        build(tmp_path, durations, batch_bins=12000, min_batch_size=2, oversized="error")


def test_frontend_computes_a_padded_batch_at_its_planned_rates():
    frontend = DynResFrontend(**RECIPE_FRONTEND).train()
    lengths = torch.tensor([16000 * 4, 16000])  # 4 s and 1 s: no common T inside the clamp
    plan = plan_of([201, 51])  # each at 50 Hz
    feats, feats_lengths, _, fallback = frontend.features(torch.randn(2, 16000 * 4) * 0.1, lengths, plan)
    assert feats_lengths.tolist() == [201, 51] and feats.shape[1] == 201
    assert bool((feats[1, 51:] == 0).all()) and not fallback
    # A padded plan that happens to equal the standard counts is still computed as planned, not
    # taken for a fallback batch: the plan is what the frontend computes.
    standard = plan_of([401, 101])
    out = frontend.features(torch.randn(2, 16000 * 4) * 0.1, lengths, standard)
    assert out.feats_lengths.tolist() == [401, 101] and not out.fallback and out.frame_rates_hz is not None


def test_frontend_refuses_a_plan_it_cannot_produce():
    frontend = DynResFrontend(**RECIPE_FRONTEND).train()
    lengths = torch.tensor([16000, 8000])
    with pytest.raises(ValueError, match="same frontend_conf"):  # 0.5 s cannot take 101 frames (max 66 at 130 Hz)
        frontend(torch.zeros(2, 16000), lengths, plan_of([101, 101]))


def test_mismatched_shape_files_name_the_keys(tmp_path):
    shape_files, _ = write_shape_files(tmp_path, [16000, 32000])
    with open(shape_files[1], "a") as f:
        f.write("extra_utt 3,13\n")
    with pytest.raises(RuntimeError, match="extra_utt"):
        DynResBatchSampler(batch_bins=1000, shape_files=shape_files, policy=POLICY)


def test_bad_options_are_rejected(tmp_path):
    shape_files, _ = write_shape_files(tmp_path, [16000])
    with pytest.raises(ValueError, match="batch_bins"):
        DynResBatchSampler(batch_bins=0, shape_files=shape_files, policy=POLICY)
    with pytest.raises(ValueError, match="drop_last"):
        DynResBatchSampler(batch_bins=10, shape_files=shape_files, policy=POLICY, drop_last=True)
    with pytest.raises(ValueError, match="oversized"):
        DynResBatchSampler(batch_bins=10, shape_files=shape_files, policy=POLICY, oversized="ignore")
    with pytest.raises(ValueError, match="batch_fill"):
        DynResBatchSampler(batch_bins=10, shape_files=shape_files, policy=POLICY, batch_fill="above")


def test_shape_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "speech_shape"
    bad.write_text("utt1 16000\nutt1 8000\n")
    with pytest.raises(ValueError, match="speech_shape:2: utterance utt1 appears twice"):
        DynResBatchSampler(batch_bins=1000, shape_files=[str(bad)], policy=POLICY)
    bad.write_text("utt1 16000\nutt2 abc\n")
    with pytest.raises(ValueError, match="speech_shape:2: expected"):
        DynResBatchSampler(batch_bins=1000, shape_files=[str(bad)], policy=POLICY)
