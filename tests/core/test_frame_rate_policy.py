import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from factory import RECIPE_FRONTEND, common_frame_count, frame_range, frame_rate, frame_shift, standard_count

POLICY = FrameRatePolicy(fs=16000, hop_length=160)  # 16 kHz, hop 160 (100 Hz), clamp 70-130 Hz


def frames_with_shift(num_samples: int, shift: float) -> int:
    """Frame count of a centred STFT with a (fractional) frame shift."""
    return 1 + math.floor(num_samples / shift)


@given(st.integers(min_value=1, max_value=16000 * 600))
def test_every_frame_count_in_range_is_reachable_inside_the_clamp(num_samples):
    lo, hi = frame_range(POLICY, num_samples)
    assert lo <= hi
    for t in {lo, hi, (lo + hi) // 2, standard_count(POLICY, num_samples)} & set(range(lo, hi + 1)):
        shift = frame_shift(POLICY, num_samples, t)
        assert frames_with_shift(num_samples, shift) == t
        rate = frame_rate(POLICY, num_samples, t)
        assert 70.0 - 1e-6 <= rate <= 130.0 + 1e-6


@given(st.integers(min_value=1, max_value=16000 * 60))
def test_standard_frame_count_uses_the_standard_hop(num_samples):
    t = standard_count(POLICY, num_samples)
    assert t == 1 + num_samples // 160
    if t > 1:
        assert frame_shift(POLICY, num_samples, t) == 160.0


@settings(max_examples=200)
@given(st.lists(st.integers(min_value=3200, max_value=16000 * 30), min_size=1, max_size=40))
def test_common_frame_count_is_feasible_for_every_utterance_or_none(lengths):
    t = common_frame_count(POLICY, lengths)
    ranges = [frame_range(POLICY, n) for n in lengths]
    feasible = max(r[0] for r in ranges) <= min(r[1] for r in ranges)
    assert (t is not None) == feasible
    if t is not None:
        assert all(lo <= t <= hi for lo, hi in ranges)


def test_clamp_limits_the_duration_ratio_of_a_batch():
    one_sec = 16000
    assert common_frame_count(POLICY, [one_sec, int(1.8 * one_sec)]) is not None
    assert common_frame_count(POLICY, [one_sec, int(2.0 * one_sec)]) is None


def test_8k_rates_are_rates_and_hops_are_samples():
    p8 = FrameRatePolicy(fs="8k", hop_length=80)
    assert p8.standard_frame_rate_hz == 100.0
    assert frame_range(p8, 8000) == frame_range(POLICY, 16000)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(min_frame_rate_hz=120.0), "min_frame_rate_hz"),
        (dict(max_frame_rate_hz=90.0), "max_frame_rate_hz"),
        (dict(min_frame_rate_hz=0.0), "min_frame_rate_hz"),
        (dict(hop_length=0), "hop_length"),
        (dict(fs=-1), "fs"),
        (dict(target_frame_rate_hz=60.0), "target_frame_rate_hz"),
        (dict(target_frame_rate_hz=140.0), "target_frame_rate_hz"),
        (dict(target_frame_rate_range_hz=(60.0, 120.0)), "target_frame_rate_range_hz"),
        (dict(target_frame_rate_range_hz=(110.0, 90.0)), "target_frame_rate_range_hz"),
        (dict(target_frame_rate_range_hz=(90.0,)), "target_frame_rate_range_hz"),
        (dict(target_frame_rate_range_hz=(80.0, 120.0), target_frame_rate_hz=90.0), "keep one of them"),
    ],
)
def test_invalid_settings_are_rejected_with_the_key_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FrameRatePolicy(**{"fs": 16000, "hop_length": 160, **kwargs})


@settings(max_examples=100)
@given(st.lists(st.integers(min_value=16000, max_value=16000 * 20), min_size=1, max_size=20))
def test_curriculum_starts_at_the_lowest_rates_and_never_exceeds_the_rule(lengths):
    policy = FrameRatePolicy(fs=16000, hop_length=160, curriculum_epochs=4)
    rule = common_frame_count(policy, lengths)
    if rule is None:
        return
    lo = max(frame_range(policy, n)[0] for n in lengths)
    per_epoch = [common_frame_count(policy, lengths, epoch=e) for e in range(1, 7)]
    assert per_epoch[0] == lo
    assert per_epoch == sorted(per_epoch) and max(per_epoch) <= rule
    assert per_epoch[4] == per_epoch[5] == rule  # from epoch N + 1 on: the normal rule


@settings(max_examples=50, deadline=None)
@given(samples=st.lists(st.integers(0, 10**8), min_size=1, max_size=50), low=st.sampled_from([None, 50.0, 70.0]))
def test_vectorized_frame_count_ranges_equal_the_scalar_ones(samples, low):
    policy = FrameRatePolicy(fs=16000, hop_length=160)
    lo, hi = policy.frame_count_ranges(samples, low)
    assert [(int(a), int(b)) for a, b in zip(lo, hi)] == [frame_range(policy, n, low) for n in samples]


@settings(max_examples=100)
@given(
    st.lists(st.integers(min_value=1600, max_value=16000 * 20), min_size=1, max_size=20),
    st.sampled_from([70.0, 80.0, 90.0, 100.0, 115.0, 130.0]),
)
def test_target_frame_rate_scales_the_rule_inside_the_clamp(lengths, target_hz):
    standard = FrameRatePolicy(fs=16000, hop_length=160)
    aimed = FrameRatePolicy(fs=16000, hop_length=160, target_frame_rate_hz=target_hz)
    t_std, t_aim = common_frame_count(standard, lengths), common_frame_count(aimed, lengths)
    assert (t_std is None) == (t_aim is None)  # the target never changes which batches are feasible
    if t_std is None:
        return
    for n in lengths:  # still inside every utterance's clamp
        lo, hi = frame_range(aimed, n)
        assert lo <= t_aim <= hi
    sum_std = sum(standard_count(standard, n) for n in lengths)
    wanted = math.floor(sum_std * target_hz * 160 / (16000 * len(lengths)) + 0.5)
    lo = max(frame_range(aimed, n)[0] for n in lengths)
    hi = min(frame_range(aimed, n)[1] for n in lengths)
    assert t_aim == min(max(wanted, lo), hi)  # the rule, with the mean scaled by target / standard
    assert (t_aim <= t_std) == (target_hz <= 100.0) or t_aim == t_std


def test_target_at_the_standard_rate_is_the_default_rule():
    lengths = [16000, 20000, 23000]
    assert common_frame_count(FrameRatePolicy(fs=16000, hop_length=160, target_frame_rate_hz=100.0), lengths) == common_frame_count(
        FrameRatePolicy(fs=16000, hop_length=160), lengths)
    # 8 kHz, hop 80: rates stay rates
    assert common_frame_count(FrameRatePolicy(fs=8000, hop_length=80, target_frame_rate_hz=80.0), [8000]) == 81


def test_eval_frame_counts_are_the_standard_counts_unless_an_eval_rate_is_set():
    lengths = [0, 1, 159, 160, 16000, 16001, 123457]
    policy = FrameRatePolicy(fs=16000, hop_length=160)
    assert policy.eval_frame_counts(lengths).tolist() == policy.standard_frame_counts(lengths).tolist()
    assert policy.eval_frame_shift_samples == 160.0
    at80 = FrameRatePolicy(fs=16000, hop_length=160, eval_frame_rate_hz=80.0)
    assert at80.eval_frame_counts(lengths).tolist() == [1 + n // 200 for n in lengths]
    assert at80.eval_frame_shift_samples == 200.0
    at82 = FrameRatePolicy(fs=16000, hop_length=160, eval_frame_rate_hz=82.0)
    assert at82.eval_frame_counts(lengths).tolist() == [1 + n * 82 // 16000 for n in lengths]
    with pytest.raises(ValueError, match="eval_frame_rate_hz=65.0 must lie in"):
        FrameRatePolicy(fs=16000, hop_length=160, eval_frame_rate_hz=65.0)
