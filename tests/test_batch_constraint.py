"""The batch-fit rules of BatchConstraint: the frame count it admits is the policy's rule, inside the budget,
the batch-size limit and the CTC minimum; and the sampler never closes a batch the constraint admits."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from espnet_dynres.batch_constraint import BatchConstraint
from espnet_dynres.frame_rate_policy import FrameRatePolicy
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import write_shape_files

POLICY = FrameRatePolicy()


def test_each_rule_can_refuse_a_batch():
    lengths = [16000, 17000]  # 1.0 and 1.06 s: T = 104 at the mean standard count
    lo, hi = POLICY.frame_count_ranges(lengths)
    args = (int(lo.max()), int(hi.min()), int(POLICY.standard_frame_counts(lengths).sum()), 2)
    assert BatchConstraint(POLICY).frame_count(*args) == 104
    assert BatchConstraint(POLICY, batch_bins=208).frame_count(*args) == 104
    assert BatchConstraint(POLICY, batch_bins=207).frame_count(*args) is None  # (b) the budget
    assert BatchConstraint(POLICY, max_batch_size=1).frame_count(*args) is None  # (c) the size
    assert BatchConstraint(POLICY).frame_count(*args, min_frames=105) is None  # (d) the CTC minimum
    assert BatchConstraint(POLICY).frame_count(200, 100, 0, 2) is None  # (a) no common T in the clamp
    with pytest.raises(ValueError, match="batch_bins"):
        BatchConstraint(POLICY, batch_bins=0)


def test_a_whole_batch_relaxes_to_the_fallback_rate_then_falls_back_to_the_standard_rate():
    constraint = BatchConstraint(POLICY)
    assert constraint.batch_frame_counts([16000, 16000]) == ([101, 101], False)
    counts, fallback = constraint.batch_frame_counts([16000, 35200])  # 1.0 and 2.2 s: only below 70 Hz
    assert not fallback and len(set(counts)) == 1 and counts[0] < POLICY.frame_count_range(35200)[0]
    assert POLICY.frame_rate_hz(35200, counts[0]) >= 50.0
    assert constraint.batch_frame_counts([16000, 64000]) == ([101, 401], True)  # 1 s and 4 s: none even at 50 Hz


@settings(max_examples=25)
@given(durations=st.lists(st.floats(0.2, 30.0), min_size=2, max_size=80), batch_bins=st.integers(300, 8000),
       max_batch_size=st.one_of(st.none(), st.integers(1, 12)))
@example(durations=[2.0, 2.0, 2.0], batch_bins=402, max_batch_size=None)  # ties: file order decides
def test_the_sampler_closes_a_batch_only_when_the_next_utterance_would_break_the_constraint(
        tmp_path_factory, durations, batch_bins, max_batch_size):
    tmp = tmp_path_factory.mktemp("shapes")
    shape_files, utt2samples = write_shape_files(tmp, [int(d * 16000) for d in durations])
    sampler = DynResBatchSampler(batch_bins=batch_bins, shape_files=shape_files, policy=POLICY,
                                 max_batch_size=max_batch_size, shuffle_jitter=0.0)
    constraint = sampler.constraint
    # The sampler fills batches in length order, ties by file order (shuffle_jitter 0): order the
    # batches and pick "the next utterance" the same way.
    fill_rank = {k: (n, i) for i, (k, n) in enumerate(utt2samples.items())}
    batches = sorted(sampler.batches_for_epoch(1), key=lambda b: min(fill_rank[k] for k in b))
    for batch, nxt in zip(batches, batches[1:]):
        members = [utt2samples[k] for k in batch]
        if len(members) > 1:  # a batch of several fits
            lo, hi = POLICY.frame_count_ranges(members)
            assert constraint.frame_count(int(lo.max()), int(hi.min()), int(POLICY.standard_frame_counts(members).sum()),
                                          len(members)) is not None
        grown = members + [min(fill_rank[k] for k in nxt)[0]]  # the next utterance in fill order
        lo, hi = POLICY.frame_count_ranges(grown)
        assert constraint.frame_count(int(lo.max()), int(hi.min()), int(POLICY.standard_frame_counts(grown).sum()),
                                      len(grown)) is None
