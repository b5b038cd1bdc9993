"""The batch planner's rules: each can refuse an utterance, a whole batch relaxes to the fallback rate, then
pads each member at its lowest count, lowering keeps the budget, evaluation batches cost B × the longest
standard count; and the sampler closes a batch only when its next utterance would not join."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from espnet_dynres.core.batch_planner import BatchKind, BatchPlan, BatchPlanner, fits_budget
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import write_shape_files, frame_range, frame_rate

POLICY = FrameRatePolicy(fs=16000, hop_length=160)


def joins(lengths, **kwargs) -> bool:
    """Whether the last of ``lengths`` joins a batch of the others."""
    planner = BatchPlanner(POLICY, lengths, **kwargs)
    planner.reset()
    assert all(planner.add(i) for i in range(len(lengths) - 1))
    return planner.add(len(lengths) - 1)


def test_each_rule_can_refuse_an_utterance():
    lengths = [16000, 17000]  # 1.0 and 1.06 s: T = 104 at the mean standard count
    assert BatchPlanner(POLICY, lengths).plan([0, 1]) == BatchPlan((104, 104), BatchKind.RULE)
    assert joins(lengths) and joins(lengths, batch_bins=208)
    assert not joins(lengths, batch_bins=207)  # (b) the budget
    assert not joins(lengths, max_batch_size=1)  # (c) the size
    assert not joins(lengths, min_frames=[1, 105])  # (d) the CTC minimum
    assert not joins([16000, 40000])  # (a) no common T in the clamp (1 s and 2.5 s)
    with pytest.raises(ValueError, match="batch_bins"):
        BatchPlanner(POLICY, lengths, batch_bins=0)


def test_nearest_fill_joins_an_utterance_that_overshoots_less_than_the_room_left():
    lengths = [16000, 16000, 16000]  # T = 101 each
    assert not joins(lengths, batch_bins=300)
    assert joins(lengths, batch_bins=300, batch_fill="nearest")  # over by 3, room 98: joins at T = 100
    assert BatchPlanner(POLICY, lengths, batch_bins=300).plan([0, 1, 2]) == BatchPlan((100,) * 3, BatchKind.LOWERED)


def test_a_whole_batch_relaxes_to_the_fallback_rate_then_pads_each_member_at_its_lowest_count():
    planner = BatchPlanner.for_batch(POLICY, [16000, 16000])
    assert planner.plan_batch() == BatchPlan((101, 101), BatchKind.RULE)
    plan = BatchPlanner.for_batch(POLICY, [16000, 35200]).plan_batch()  # 1.0 and 2.2 s: only below 70 Hz
    assert plan.kind is BatchKind.RULE and plan.frames[0] == plan.frames[1] < frame_range(POLICY, 35200)[0]
    assert frame_rate(POLICY, 35200, plan.frames[0]) >= 50.0
    plan = BatchPlanner.for_batch(POLICY, [16000, 64000]).plan_batch()  # 1 s and 4 s: none even at 50 Hz
    assert plan == BatchPlan((51, 201), BatchKind.PADDED) and plan.num_frames is None  # each at 50 Hz
    # the CTC minimum raises a member's lowest count
    assert BatchPlanner(POLICY, [16000, 64000], min_frames=[60, 1]).plan([0, 1]).frames == (60, 201)


def test_lowering_keeps_the_budget_down_to_the_fallback_rate():
    planner = BatchPlanner(POLICY, [160000], batch_bins=800)  # 10 s: 701 frames at 70 Hz, 501 at 50 Hz
    assert planner.plan([0]) == BatchPlan((800,), BatchKind.LOWERED)
    planner = BatchPlanner(POLICY, [160000], batch_bins=400)  # under the fallback rate: 501, over the budget
    plan = planner.plan([0])
    assert plan == BatchPlan((501,), BatchKind.LOWERED) and not planner.within_budget(plan.frames)


def test_evaluation_batches_cost_their_size_times_the_longest_standard_count():
    lengths = [16000, 32000, 8000]  # 101, 201, 51 standard frames
    planner = BatchPlanner(POLICY, lengths, batch_bins=402, evaluation=True)
    assert planner.plan([0, 1, 2]) == BatchPlan((101, 201, 51), BatchKind.STANDARD)
    assert joins(lengths[:2], batch_bins=402, evaluation=True)
    assert not joins(lengths, batch_bins=402, evaluation=True)  # 3 x 201 > 402
    assert fits_budget(2, 201, 402) and not fits_budget(2, 201, 401)
    assert not fits_budget(2, 10, None, max_batch_size=1)


@settings(max_examples=25)
@given(durations=st.lists(st.floats(0.2, 30.0), min_size=2, max_size=80), batch_bins=st.integers(300, 8000),
       max_batch_size=st.one_of(st.none(), st.integers(1, 12)))
@example(durations=[2.0, 2.0, 2.0], batch_bins=402, max_batch_size=None)  # ties: file order decides
def test_the_sampler_closes_a_batch_only_when_the_next_utterance_would_not_join(
        tmp_path_factory, durations, batch_bins, max_batch_size):
    tmp = tmp_path_factory.mktemp("shapes")
    shape_files, utt2samples = write_shape_files(tmp, [int(d * 16000) for d in durations])
    sampler = DynResBatchSampler(batch_bins=batch_bins, shape_files=shape_files, policy=POLICY,
                                 max_batch_size=max_batch_size, shuffle_jitter=0.0)
    # The sampler fills batches in length order, ties by file order (shuffle_jitter 0): order the
    # batches and pick "the next utterance" the same way.
    fill_rank = {k: (n, i) for i, (k, n) in enumerate(utt2samples.items())}
    batches = sorted([b.keys for b in sampler.planned_batches(1)], key=lambda b: min(fill_rank[k] for k in b))
    for batch, nxt in zip(batches, batches[1:]):
        members = sorted(utt2samples[k] for k in batch)
        grown = members + [min(fill_rank[k] for k in nxt)[0]]  # the next utterance in fill order
        planner = BatchPlanner(POLICY, grown, batch_bins=batch_bins, max_batch_size=max_batch_size)
        planner.reset()
        assert all(planner.add(i) for i in range(len(members)))  # a batch of several fits
        assert not planner.add(len(members))
