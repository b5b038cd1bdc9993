"""The BatchNorm re-estimate's sample: bounded by the run's evaluation budget, uniform over the epoch,
and batched by the planner in evaluation mode."""

import random

import pytest
import torch

from espnet_dynres.asr.batchnorm_sample import BatchNormSample, RestatBudget
from espnet_dynres.glue.trainer import restat_budget
from factory import build_tiny_model, pad_batch, real_utterances, tiny_asr_args


def test_sample_batches_are_sorted_cut_to_their_shortest_and_cover_the_sample():
    r = BatchNormSample(10)
    lengths = [7, 3, 9, 5, 4]
    speech = torch.arange(5, dtype=torch.float32)[:, None].repeat(1, 9)
    r.add(speech, torch.tensor(lengths), RestatBudget(max_batch_size=2))  # room for 20 utterances
    batches = r.batches(RestatBudget(max_batch_size=2))
    assert [tuple(b.shape) for b in batches] == [(2, 3), (2, 5), (1, 9)]
    assert [b[:, 0].tolist() for b in batches] == [[1.0, 4.0], [3.0, 0.0], [2.0]]
    assert all(b.device.type == "cpu" for b in batches)


def test_sample_batches_obey_the_bins_budget_and_an_utterance_over_it_is_alone():
    r = BatchNormSample(10)
    lengths = [7, 3, 9, 5, 4]
    r.add(torch.arange(5, dtype=torch.float32)[:, None].repeat(1, 9), torch.tensor(lengths), RestatBudget())
    # elements (numel's unit): B x the longest member <= 12
    assert [tuple(b.shape) for b in r.batches(RestatBudget(batch_bins=12, max_batch_size=None))] == \
        [(2, 3), (1, 5), (1, 7), (1, 9)]
    # 5, 7 and 9 are each over a budget of 4: alone, never joined
    assert [tuple(b.shape) for b in r.batches(RestatBudget(batch_bins=4, max_batch_size=None))] == \
        [(1, 3), (1, 4), (1, 5), (1, 7), (1, 9)]
    # standard frames (dynres's unit): 1 + T // hop
    frames = RestatBudget(batch_bins=6, max_batch_size=None, hop_length=2)  # costs 2, 3, 3, 4, 5
    assert [tuple(b.shape) for b in r.batches(frames)] == [(2, 3), (1, 5), (1, 7), (1, 9)]
    # ESPnet's folded rule: 4 per batch, divided by 1 + T // fold_length of the longest
    folded = RestatBudget(batch_bins=None, max_batch_size=4, fold_length=5)  # 4 up to T 4, 2 up to 9
    assert [tuple(b.shape) for b in r.batches(folded)] == [(2, 3), (2, 5), (1, 9)]
    with pytest.raises(ValueError, match="batch_bins or max_batch_size"):
        RestatBudget(batch_bins=None, max_batch_size=None)


def test_features_are_kept_as_sequences_of_frames():
    r = BatchNormSample(4)
    feats = torch.randn(2, 10, 20)  # (B, T_frames, D)
    r.add(feats, torch.tensor([10, 6]), RestatBudget())
    assert sorted(tuple(u.shape) for u in r._utts) == [(6, 20), (10, 20)]
    assert [tuple(b.shape) for b in r.batches(RestatBudget(batch_bins=400, max_batch_size=None))] == [(2, 6, 20)]
    with pytest.raises(ValueError, match=r"\(B, T_frames, D\).*got \(2, 3, 4, 5\)"):
        r.add(torch.zeros(2, 3, 4, 5), torch.tensor([3, 3]), RestatBudget())


def test_negative_size_is_refused():
    with pytest.raises(ValueError, match="batchnorm_restat_batches must be >= 0"):
        BatchNormSample(-1)


def test_the_budget_comes_from_the_runs_validation_budget():
    for overrides, expected in (
        (dict(batch_type="dynres", batch_bins=5000, valid_batch_bins=900, max_batch_size=40),
         RestatBudget(batch_bins=900, max_batch_size=40, hop_length=160)),
        (dict(batch_type="numel", batch_bins=320000), RestatBudget(batch_bins=320000, max_batch_size=None)),
        (dict(batch_type="folded", batch_size=7, fold_length=[80000, 150]),
         RestatBudget(batch_bins=None, max_batch_size=7, fold_length=80000)),
    ):
        overrides.update(model="token_normalized", model_conf=dict(ctc_weight=0.3))
        assert restat_budget(tiny_asr_args(**overrides), build_tiny_model(**overrides)) == expected


def reference_sample(costs, capacity, seed):
    """The contract of the sample, computed offline: one key per utterance in offered order from
    ``random.Random(seed)``, then the longest run in key order whose total cost fits ``capacity``."""
    rng = random.Random(seed)
    keys = [rng.random() for _ in costs]
    kept, total = [], 0
    for i in sorted(range(len(costs)), key=keys.__getitem__):
        if total + costs[i] > capacity:
            break
        kept.append(i)
        total += costs[i]
    return sorted(kept)


def offer(r, lengths, budget, batch=4):
    """Offer utterances ``i`` of ``lengths[i]`` samples, each filled with the value ``i``, in batches."""
    for start in range(0, len(lengths), batch):
        part = lengths[start:start + batch]
        speech = torch.zeros(len(part), max(part))
        for b, n in enumerate(part):
            speech[b, :n] = start + b
        r.add(speech, torch.tensor(part), budget)
    return sorted(int(u[0]) for u in r._utts)


def test_the_sample_is_the_longest_prefix_in_key_order_that_fits_the_budget():
    """Bounded in frames, not in utterances: long-tailed lengths (1 to 100 standard frames), a
    capacity of 3 batches of 60 frames; the streaming sample equals the offline definition."""
    lengths = [160 * random.Random(i).choice([1, 2, 3, 5, 10, 40, 100]) for i in range(60)]
    budget = RestatBudget(batch_bins=60, max_batch_size=None, hop_length=160)
    costs = [1 + n // 160 for n in lengths]
    for seed in range(5):
        r = BatchNormSample(3, seed=seed)
        kept = offer(r, lengths, budget)
        assert kept == reference_sample(costs, 180, seed)
        assert r.total_cost == sum(costs[i] for i in kept) <= 180
        assert all(u.numel() == lengths[int(u[0])] for u in r._utts)  # unpadded copies
    assert len({tuple(offer(BatchNormSample(3, seed=s), lengths, budget)) for s in range(5)}) > 1
    # the same offer, one utterance per call: the same sample (keys follow the utterances, not the batches)
    assert offer(BatchNormSample(3, seed=4), lengths, budget, batch=1) == kept  # seed 4, the loop's last


def test_the_sample_is_deterministic_and_uniform_over_the_epoch():
    """A count budget (ESPnet's ``folded``: one per utterance): 5 of 40 utterances, each kept 5/40 of
    the time over 400 seeds, early and late ones alike; the draws restart with ``clear``."""
    budget = RestatBudget(max_batch_size=5)  # 1 batch of 5 utterances
    lengths = [6, 5, 4, 3] * 10
    r = BatchNormSample(1, seed=3)
    kept = offer(r, lengths, budget)
    r.clear()
    assert len(r) == 0 and offer(r, lengths, budget) == kept and len(kept) == 5
    counts = torch.zeros(40)
    for seed in range(400):
        for i in offer(BatchNormSample(1, seed=seed), lengths, budget):
            counts[i] += 1
    assert abs(counts[:10].mean() - 50) < 10 and abs(counts[30:].mean() - 50) < 10


def test_the_samples_size_follows_the_budget_not_the_utterance_count():
    """The same training utterances (48 digits, about 2,000 standard frames) under a validation budget
    of 200 frames: a sample of 1 evaluation batch holds at most 200, a sample of 6 nearly 1,200."""
    overrides = dict(model="token_normalized", batch_type="dynres", batch_bins=3000, valid_batch_bins=200)
    budget = restat_budget(tiny_asr_args(**overrides), build_tiny_model(**overrides))
    speech, lengths = pad_batch(real_utterances(48, start=100))
    frames = {}
    for num_batches in (1, 6):
        sample = BatchNormSample(num_batches)
        sample.add(speech, lengths, budget)
        frames[num_batches] = sample.total_cost
        assert frames[num_batches] <= 200 * num_batches
    assert 200 * 6 - 100 < frames[6] and frames[1] < frames[6] / 3
