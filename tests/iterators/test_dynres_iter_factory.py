"""``DynResIterFactory``: per-epoch plans reach the model, DDP shards are equal, resume is exact."""

import collections

import numpy as np
import pytest
import torch
from espnet2.train.collate_fn import CommonCollateFn

from espnet_dynres.core.batch_planner import BatchKind
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from espnet_dynres.iterators.dynres_iter_factory import DynResIterFactory
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import write_shape_files


class ShapeOnlyDataset:
    """ESPnet-style dataset ``uid -> (uid, {"speech": zeros(n)})`` (the plan does not need audio)."""

    def __init__(self, utt2samples):
        self.utt2samples = utt2samples

    def __getitem__(self, uid):
        return uid, {"speech": np.zeros(self.utt2samples[uid], dtype=np.float32)}

    def __len__(self):
        return len(self.utt2samples)


def make_factory(tmp_path, train=True, rank=0, world_size=1, num_iters_per_epoch=None, seed=0):
    rng = np.random.default_rng(0)
    samples = (rng.lognormal(np.log(2.0), 0.5, size=80) * 16000).astype(int)
    shape_files, utt2samples = write_shape_files(tmp_path, samples)
    sampler = DynResBatchSampler(
        batch_bins=1500, shape_files=shape_files, policy=FrameRatePolicy(fs=16000, hop_length=160),
        min_batch_size=world_size, seed=seed, shuffle=train,
    )
    factory = DynResIterFactory(
        dataset=ShapeOnlyDataset(utt2samples), sampler=sampler, train=train,
        num_iters_per_epoch=num_iters_per_epoch, rank=rank, world_size=world_size, seed=seed,
        collate_fn=CommonCollateFn(float_pad_value=0.0, int_pad_value=-1),
    )
    return factory, utt2samples


def epoch_batches(factory, epoch):
    return [(list(uids), batch) for uids, batch in factory.build_iter(epoch)]


def test_every_utterance_once_and_the_plan_reaches_the_batch(tmp_path):
    factory, utt2samples = make_factory(tmp_path)
    for epoch in (1, 2):
        seen = collections.Counter()
        plan = {frozenset(b.keys): b.plan for b in factory.sampler.planned_batches(epoch)}
        for uids, batch in epoch_batches(factory, epoch):
            seen.update(uids)
            assert batch["batch_plan"] == plan[frozenset(uids)]  # whole: frames in the ids' order, and kind
            assert batch["speech_lengths"].tolist() == [utt2samples[u] for u in uids]
        assert set(seen) == set(utt2samples) and set(seen.values()) == {1}


def test_rebuilt_factory_gives_the_same_epoch(tmp_path):
    # --resume true builds a new factory and asks for the interrupted epoch.
    first, _ = make_factory(tmp_path, seed=3)
    again, _ = make_factory(tmp_path, seed=3)
    a = [(u, b["batch_plan"]) for u, b in epoch_batches(first, 4)]
    b = [(u, b["batch_plan"]) for u, b in epoch_batches(again, 4)]
    assert a == b
    assert a != [(u, b["batch_plan"]) for u, b in epoch_batches(first, 5)]


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_ranks_get_equal_batch_counts_with_the_same_frame_count(tmp_path, world_size):
    shards = [epoch_batches(make_factory(tmp_path, rank=r, world_size=world_size)[0], 2) for r in range(world_size)]
    assert len({len(s) for s in shards}) == 1  # same number of steps on every rank: no deadlock
    union = collections.Counter(u for s in shards for uids, _ in s for u in uids)
    assert set(union.values()) == {1} and len(union) == 80
    for steps in zip(*shards):
        assert all(len(uids) >= 1 for uids, _ in steps)
        frames = {t for _, batch in steps for t in batch["batch_plan"].frames}
        assert len(frames) == 1  # one T across ranks (no fallback batch in this corpus)
        assert all(len(batch["batch_plan"].frames) == len(uids) for uids, batch in steps)  # each rank's own part


def test_num_iters_per_epoch_streams_the_plans(tmp_path):
    factory, _ = make_factory(tmp_path, num_iters_per_epoch=7)
    plans = factory.plan_batches(1) + factory.plan_batches(2) + factory.plan_batches(3)
    stream = [factory.epoch_batches(e) for e in range(1, 1 + len(plans) // 7)]
    assert all(len(s) == 7 for s in stream)
    assert sum(stream, []) == plans[: 7 * len(stream)]


def test_validation_is_fixed_and_carries_standard_plans(tmp_path):
    factory, utt2samples = make_factory(tmp_path, train=False)
    a, b = epoch_batches(factory, 1), epoch_batches(factory, 2)
    assert [u for u, _ in a] == [u for u, _ in b]
    hop = factory.sampler.policy.hop_length
    for uids, batch in a:
        assert batch["batch_plan"].kind is BatchKind.STANDARD
        assert batch["batch_plan"].frames == tuple(1 + utt2samples[u] // hop for u in uids)
