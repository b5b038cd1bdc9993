import collections

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.frame_rate_policy import FrameRatePolicy
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import write_shape_files

POLICY = FrameRatePolicy()
durations_sec = st.lists(st.floats(min_value=0.05, max_value=120.0), min_size=1, max_size=300)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(durations=durations_sec, batch_bins=st.integers(min_value=50, max_value=20000))
def test_each_utterance_once_and_budget_kept(tmp_path, durations, batch_bins):
    shape_files, utt2samples = write_shape_files(tmp_path, [int(d * 16000) for d in durations])
    sampler = DynResBatchSampler(batch_bins=batch_bins, shape_files=shape_files, policy=POLICY)
    counts = collections.Counter(k for batch in sampler for k in batch)
    assert set(counts) == set(utt2samples) and set(counts.values()) == {1}
    for batch, planned in zip(sampler, sampler.batch_frames):
        lengths = [utt2samples[k] for k in batch]
        assert planned == POLICY.common_frame_count(lengths)
        assert planned is not None  # min_batch_size=1: every batch has a common T
        assert len(batch) * planned <= batch_bins or len(batch) == 1


def test_batches_are_not_padded_and_frontend_agrees(tmp_path):
    # A long-tailed corpus: 0.2 s to 30 s.
    durations = [0.2 * 1.03**i for i in range(170)]
    shape_files, utt2samples = write_shape_files(tmp_path, [int(d * 16000) for d in durations])
    sampler = DynResBatchSampler(batch_bins=4000, shape_files=shape_files, policy=POLICY)
    frontend = DynResFrontend()
    import torch

    for batch, planned in zip(sampler, sampler.batch_frames):
        lengths = torch.tensor([utt2samples[k] for k in batch])
        feats_lengths, fallback = frontend.frame_counts(lengths)
        assert not fallback
        assert feats_lengths.tolist() == [planned] * len(batch)
    assert sampler.num_fallback_batches == 0
    assert len(sampler) < len(durations)  # it does batch


def test_min_batch_size_is_honoured(tmp_path):
    shape_files, _ = write_shape_files(tmp_path, [16000 * (1 + i) for i in range(9)])
    sampler = DynResBatchSampler(batch_bins=100, shape_files=shape_files, policy=POLICY, min_batch_size=2)
    sizes = [len(b) for b in sampler]
    assert min(sizes) >= 2 and sum(sizes) == 9


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
