"""BatchNorm statistics re-estimated at the standard rate before evaluation (``model: dynres`` / ``token_normalized``)."""

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from espnet_dynres.asr.batchnorm_restat import BatchNormRestat, RestatBudget
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import (TINY_ENCODER_REDUCTION_LENGTH, build_tiny_model, pad_batch, random_text, real_utterances,
                     write_shape_files)
from float_tolerance import assert_close_float32

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

SPECAUG_CONF = dict(apply_time_warp=False, apply_freq_mask=True, freq_mask_width_range=[0, 4], num_freq_mask=1,
                    apply_time_mask=False)


@pytest.fixture(scope="module")
def batch():
    """Four real utterances of equal length (so the re-estimate's padding-free batches cut nothing)."""
    wavs = real_utterances(4, concat=2)
    n = min(w.numel() for w in wavs)
    speech, lengths = pad_batch([w[:n] for w in wavs])
    text, text_lengths = random_text(4, 4)
    return speech, lengths, text, text_lengths


def batchnorms(model):
    return [m for m in model.modules() if isinstance(m, _BatchNorm)]


def train_step(model, batch, speech_frames=None):
    speech, lengths, text, text_lengths = batch
    model.train()
    loss, _, _ = model(speech, lengths, text.clone(), text_lengths, speech_frames=speech_frames,
                       utt_id=[f"u{i}" for i in range(len(lengths))])
    loss.backward()
    return float(loss.detach())


def eval_input_statistics(model, wavs, with_peak=False):
    """Mean and unbiased variance over all frames of every BatchNorm layer's input, the utterances
    encoded one at a time in eval mode with the model's current statistics (independent of the class);
    ``with_peak``: and the input's largest magnitude."""
    frames = {bn: [] for bn in batchnorms(model)}
    hooks = [bn.register_forward_pre_hook(lambda m, i: frames[m].append(i[0].transpose(0, 1).reshape(i[0].shape[1], -1)))
             for bn in frames]
    model.eval()
    with torch.no_grad():
        for wav in wavs:
            model.encode(wav[None, :], torch.tensor([wav.numel()]))
    for h in hooks:
        h.remove()
    out = {}
    for bn, xs in frames.items():
        x = torch.cat(xs, dim=1).double()  # (C, all frames)
        out[bn] = (x.mean(dim=1), x.var(dim=1, unbiased=True)) + ((float(x.abs().max()),) if with_peak else ())
    return out


def assert_statistics_close(bn, mean, var, peak):
    """The layer's running statistics against float64 ones of its inputs computed in other batches (one
    utterance at a time): equal up to the float32 rounding of those inputs. Scale: the inputs' largest
    magnitude (norm-wise); a variance term (x - mean)^2 moves by at most 2 x 2 peak x the input's error."""
    assert_close_float32(bn.running_mean, mean, reduction_length=TINY_ENCODER_REDUCTION_LENGTH, scale=peak)
    assert_close_float32(bn.running_var, var, reduction_length=TINY_ENCODER_REDUCTION_LENGTH + 2, scale=4 * peak ** 2)


@pytest.mark.parametrize("model_name", ["dynres", "token_normalized"])
def test_eval_statistics_are_those_of_the_standard_rate_inputs_evaluation_sees(batch, model_name):
    speech, lengths, _, _ = batch
    model = build_tiny_model(model=model_name, model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=8))
    assert len(batchnorms(model)) == 2  # one per Conformer block (convolution module)
    plan = torch.full((4,), min(model.frontend.policy.frame_count_range(int(n))[0] for n in lengths))
    train_step(model, batch, speech_frames=plan)  # a training step far below the standard rate
    wavs = [speech[b, : lengths[b]] for b in range(4)]  # all 4 are kept (8 batches of ESPnet's 20)
    model.eval()
    expected = eval_input_statistics(model, wavs, with_peak=True)
    for bn, (mean, var, peak) in expected.items():
        assert_statistics_close(bn, mean, var, peak)


def test_without_the_restat_eval_statistics_are_the_training_average_and_differ(batch):
    """The check above can fail: ESPnet's running statistics (batchnorm_restat_batches: 0) are not those."""
    speech, lengths, _, _ = batch
    model = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=0))
    assert model._batchnorm_restat.num_batches == 0
    plan = torch.full((4,), min(model.frontend.policy.frame_count_range(int(n))[0] for n in lengths))
    train_step(model, batch, speech_frames=plan)
    model.eval()
    expected = eval_input_statistics(model, [speech[b, : lengths[b]] for b in range(4)], with_peak=True)
    gaps = [float((bn.running_mean.double() - mean).abs().max()) for bn, (mean, _, _) in expected.items()]
    assert max(gaps) > 1e-2
    with pytest.raises(AssertionError, match="not equal up to float32 rounding"):  # far beyond rounding
        for bn, (mean, var, peak) in expected.items():
            assert_statistics_close(bn, mean, var, peak)


def test_training_is_unchanged_by_the_restat(batch):
    """Training-mode BatchNorm uses batch statistics, so the re-estimate changes no training step."""
    losses = {}
    for k in (0, 8):
        model = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=k),
                                 specaug="dynres", specaug_conf=SPECAUG_CONF)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        steps = []
        for _ in range(2):
            opt.zero_grad()
            steps.append(train_step(model, batch))
            opt.step()
            model.eval()  # validation in between, as ESPnet's trainer does
        losses[k] = steps
    assert losses[0] == losses[8]


def test_no_sample_no_change_and_the_sample_is_cleared(batch):
    model = build_tiny_model(model="dynres", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=8))
    before = [bn.running_mean.clone() for bn in batchnorms(model)]
    model.eval()  # never trained: inference or collect-stats
    assert all(torch.equal(b, bn.running_mean) for b, bn in zip(before, batchnorms(model)))
    train_step(model, batch)
    assert len(model._batchnorm_restat) == 4
    model.eval()
    assert len(model._batchnorm_restat) == 0  # the next epoch draws its own sample
    with torch.no_grad():  # collect-stats style forward in training mode: nothing kept
        model.train()
        speech, lengths, text, text_lengths = batch
        model(speech, lengths, text.clone(), text_lengths)
    assert len(model._batchnorm_restat) == 0


def test_model_without_batchnorm_keeps_nothing():
    model = build_tiny_model(model="token_normalized",
                             encoder_conf=dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=2,
                                               input_layer="conv2d", use_cnn_module=False))
    assert not batchnorms(model) and model._batchnorm_restat is None


def test_negative_size_is_refused():
    with pytest.raises(ValueError, match="batchnorm_restat_batches must be >= 0"):
        build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=-1))


def test_sample_batches_are_sorted_cut_to_their_shortest_and_cover_the_sample():
    r = BatchNormRestat(10)
    lengths = [7, 3, 9, 5, 4]
    speech = torch.arange(5, dtype=torch.float32)[:, None].repeat(1, 9)
    r.add(speech, torch.tensor(lengths), RestatBudget(max_batch_size=2))  # room for 20 utterances
    batches = r.batches(RestatBudget(max_batch_size=2))
    assert [tuple(b.shape) for b in batches] == [(2, 3), (2, 5), (1, 9)]
    assert [b[:, 0].tolist() for b in batches] == [[1.0, 4.0], [3.0, 0.0], [2.0]]
    assert all(b.device.type == "cpu" for b in batches)


def test_sample_batches_obey_the_bins_budget_and_an_utterance_over_it_is_alone():
    r = BatchNormRestat(10)
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
    with pytest.raises(ValueError, match="batch_bins or max_batch_size"):
        RestatBudget(batch_bins=None, max_batch_size=None)


def test_features_are_kept_as_sequences_of_frames():
    r = BatchNormRestat(4)
    feats = torch.randn(2, 10, 20)  # (B, T_frames, D)
    r.add(feats, torch.tensor([10, 6]), RestatBudget())
    assert sorted(tuple(u.shape) for u in r._utts) == [(6, 20), (10, 20)]
    assert [tuple(b.shape) for b in r.batches(RestatBudget(batch_bins=400, max_batch_size=None))] == [(2, 6, 20)]
    with pytest.raises(ValueError, match=r"\(B, T_frames, D\).*got \(2, 3, 4, 5\)"):
        r.add(torch.zeros(2, 3, 4, 5), torch.tensor([3, 3]), RestatBudget())


def test_the_budget_comes_from_the_runs_validation_budget():
    model = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=0.3), batch_type="dynres",
                             batch_bins=5000, valid_batch_bins=900, max_batch_size=40)
    assert model.batchnorm_restat_budget == RestatBudget(batch_bins=900, max_batch_size=40, hop_length=160)
    model = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=0.3), batch_type="numel",
                             batch_bins=320000)
    assert model.batchnorm_restat_budget == RestatBudget(batch_bins=320000, max_batch_size=None)
    model = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=0.3), batch_type="folded",
                             batch_size=7, fold_length=[80000, 150])
    assert model.batchnorm_restat_budget == RestatBudget(batch_bins=None, max_batch_size=7, fold_length=80000)


def test_the_restat_of_long_utterances_costs_no_more_than_validating_them():
    """Sixteen utterances 10x longer than the rest: every encoder call of the re-estimate is at most
    the largest batch the dynres validation grouping plans for the same utterances (padded
    standard-rate frames), where a fixed count of 16 would encode all long ones at once."""
    short = real_utterances(16, start=40)  # single digits, ~0.4 s
    long_ = real_utterances(16, concat=10, start=60)  # ten digits each, ~4.5 s
    wavs = short + long_
    valid_bins = 1500
    model = build_tiny_model(model="token_normalized", batch_type="dynres", batch_bins=3000,
                             valid_batch_bins=valid_bins, model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=64))
    for group in (short, long_):
        speech, lengths = pad_batch(group)
        model._batchnorm_restat.add(speech, lengths, model.batchnorm_restat_budget)
    calls = []
    hook = model.encoder.register_forward_pre_hook(lambda m, inputs: calls.append(tuple(inputs[0].shape[:2])))
    model.eval()
    hook.remove()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        shape_files, _ = write_shape_files(Path(tmp), [w.numel() for w in wavs])
        valid = DynResBatchSampler(batch_bins=valid_bins, shape_files=shape_files, policy=model.frontend.policy,
                                   shuffle=False)
        valid_frames = max(len(b) * max(f) for b, f in zip(valid.batches_for_epoch(1), valid.utt_frames_for_epoch(1)))
    long_frames = model.frontend.policy.standard_frame_count(min(w.numel() for w in long_))
    assert 16 * long_frames > valid_frames  # what a fixed batch of 16 would have encoded
    assert calls and max(b * t for b, t in calls) <= valid_frames
    assert max(t for _, t in calls) >= long_frames  # the long utterances were encoded


def reference_sample(costs, capacity, seed):
    """The contract of the sample, computed offline: one key per utterance in offered order from
    ``random.Random(seed)``, then the longest run in key order whose total cost fits ``capacity``."""
    import random

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
    import random

    lengths = [160 * random.Random(i).choice([1, 2, 3, 5, 10, 40, 100]) for i in range(60)]
    budget = RestatBudget(batch_bins=60, max_batch_size=None, hop_length=160)
    costs = [1 + n // 160 for n in lengths]
    for seed in range(5):
        r = BatchNormRestat(3, seed=seed)
        kept = offer(r, lengths, budget)
        assert kept == reference_sample(costs, 180, seed)
        assert r.total_cost == sum(costs[i] for i in kept) <= 180
        assert all(u.numel() == lengths[int(u[0])] for u in r._utts)  # unpadded copies
    assert len({tuple(offer(BatchNormRestat(3, seed=s), lengths, budget)) for s in range(5)}) > 1
    # the same offer, one utterance per call: the same sample (keys follow the utterances, not the batches)
    assert offer(BatchNormRestat(3, seed=4), lengths, budget, batch=1) == kept  # seed 4, the loop's last


def test_the_sample_is_deterministic_and_uniform_over_the_epoch():
    """A count budget (ESPnet's ``folded``: one per utterance): 5 of 40 utterances, each kept 5/40 of
    the time over 400 seeds, early and late ones alike; the draws restart with ``clear``."""
    budget = RestatBudget(max_batch_size=5)  # 1 batch of 5 utterances
    lengths = [6, 5, 4, 3] * 10
    r = BatchNormRestat(1, seed=3)
    kept = offer(r, lengths, budget)
    r.clear()
    assert len(r) == 0 and offer(r, lengths, budget) == kept and len(kept) == 5
    counts = torch.zeros(40)
    for seed in range(400):
        for i in offer(BatchNormRestat(1, seed=seed), lengths, budget):
            counts[i] += 1
    assert abs(counts[:10].mean() - 50) < 10 and abs(counts[30:].mean() - 50) < 10


def test_the_samples_size_follows_the_budget_not_the_utterance_count(batch):
    """The same model and training utterances (48 digits, about 2,000 standard frames): a sample of 1
    evaluation batch of 200 frames holds at most 200, a sample of 6 nearly 1,200."""
    frames = {}
    for num_batches in (1, 6):
        model = build_tiny_model(model="token_normalized", batch_type="dynres", batch_bins=3000,
                                 valid_batch_bins=200, model_conf=dict(ctc_weight=0.3,
                                                                       batchnorm_restat_batches=num_batches))
        speech, lengths = pad_batch(real_utterances(48, start=100))
        model._batchnorm_restat.add(speech, lengths, model.batchnorm_restat_budget)
        frames[num_batches] = model._batchnorm_restat.total_cost
        assert frames[num_batches] <= 200 * num_batches
    assert 200 * 6 - 100 < frames[6] and frames[1] < frames[6] / 3


def _ddp_worker(rank: int, init_file: str, out_dir: str, batch) -> None:
    import os

    import torch.distributed as dist

    import espnet_dynres  # noqa: F401  (registers the plugin's names in this process)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    model = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=8))
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    speech, lengths, text, text_lengths = (t[rank::2].clone() for t in batch)  # ESPnet's split
    loss, _, _ = ddp(speech, lengths, text, text_lengths)
    loss.backward()
    ddp.eval()  # ESPnet's validate_one_epoch, on every rank
    if rank == 0:
        torch.save([(bn.running_mean.clone(), bn.running_var.clone()) for bn in batchnorms(model)],
                   os.path.join(out_dir, "rank0.pt"))
    dist.destroy_process_group()


@pytest.mark.slow
def test_under_ddp_the_statistics_are_those_of_every_ranks_sample(batch, tmp_path):
    """Two gloo processes, each with half the batch, end with the statistics of the whole sample."""
    import torch.multiprocessing as mp

    mp.spawn(_ddp_worker, args=(str(tmp_path / "init"), str(tmp_path), batch), nprocs=2, join=True)
    ranks = torch.load(tmp_path / "rank0.pt")
    model = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=8))
    train_step(model, batch)  # one process holding all four utterances
    model.eval()
    rank0_only = eval_input_statistics(model, [batch[0][b, : batch[1][b]] for b in (0, 2)])
    for (mean, var), bn, (mean0, _) in zip(ranks, batchnorms(model), rank0_only.values()):
        torch.testing.assert_close(mean, bn.running_mean, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(var, bn.running_var, rtol=1e-4, atol=1e-5)
        assert float((mean.double() - mean0).abs().max()) > 1e-3  # rank 0's own half alone differs


def _restat_both_ways(model, batch, blocks_of):
    """After one training step, re-estimate ``model`` from the same sample with ``blocks_of(model)``
    and, from the same starting statistics, with one pass per layer (``blocks=None``); returns the
    two lists of ``(running_mean, running_var)`` per BatchNorm layer."""
    import copy

    from espnet_dynres.asr.batchnorm_restat import batchnorm_layers

    train_step(model, batch)
    restat = model._batchnorm_restat
    assert len(restat) > 0
    torch.nn.Module.train(model, False)  # eval mode without the automatic re-estimate
    layers = batchnorm_layers(model)
    start = [(bn.running_mean.clone(), bn.running_var.clone()) for bn in layers]
    results = []
    for blocks in (blocks_of(model), None):
        for bn, (mean, var) in zip(layers, start):
            bn.running_mean.copy_(mean)
            bn.running_var.copy_(var)
        sample = copy.deepcopy(restat)
        assert sample.restat(model.encode, layers, model.batchnorm_restat_budget, blocks=blocks) == len(layers)
        results.append([(bn.running_mean.clone(), bn.running_var.clone()) for bn in layers])
    return start, results


@pytest.mark.parametrize("encoder_conf", [
    dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=3, input_layer="conv2d"),
    dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=3, input_layer="conv2d",
         pos_enc_layer_type="rel_pos", selfattention_layer_type="rel_selfattn", rel_pos_type="latest"),
])
def test_block_by_block_gives_exactly_the_statistics_of_one_pass_per_layer(batch, encoder_conf):
    """The cheaper method (each block run alone on the previous block's kept outputs) must give the
    same statistics, bit for bit, as encoding the sample up to each layer (so runs do not move)."""
    from espnet_dynres.asr.batchnorm_restat import encoder_blocks

    model = build_tiny_model(model="dynres", specaug="dynres", specaug_conf=SPECAUG_CONF, encoder_conf=encoder_conf)
    start, (blockwise, per_layer) = _restat_both_ways(model, batch, encoder_blocks)
    assert len(blockwise) == 3
    for (ma, va), (mb, vb) in zip(blockwise, per_layer):
        assert torch.equal(ma, mb) and torch.equal(va, vb)
    assert not torch.equal(start[-1][0], blockwise[-1][0])  # it did re-estimate


def test_block_by_block_runs_each_block_through_once_per_batch(batch):
    """Counting the encoder blocks that run to their end: one pass per layer runs the blocks
    before layer l again for every l (0 + 1 + 2 + 3 = 6 per batch with 4 blocks); block by block
    runs each block through once, the last not at all (3), plus the one traced pass (4)."""
    import copy

    from espnet_dynres.asr.batchnorm_restat import batchnorm_layers, encoder_blocks

    model = build_tiny_model(model="dynres", specaug="dynres", specaug_conf=SPECAUG_CONF,
                             encoder_conf=dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=4,
                                               input_layer="conv2d"))
    train_step(model, batch)
    torch.nn.Module.train(model, False)
    blocks = encoder_blocks(model)
    completed = [0]
    handles = [b.register_forward_hook(lambda m, a, o: completed.__setitem__(0, completed[0] + 1)) for b in blocks]
    counts = {}
    for name, given in (("blockwise", blocks), ("per_layer", None)):
        completed[0] = 0
        copy.deepcopy(model._batchnorm_restat).restat(model.encode, batchnorm_layers(model),
                                                      model.batchnorm_restat_budget, blocks=given)
        counts[name] = completed[0]
    for h in handles:
        h.remove()
    n = len(model._batchnorm_restat.batches(model.batchnorm_restat_budget))
    assert counts == {"per_layer": 4 + 6 * n, "blockwise": 4 + 3 * n}


def test_a_chain_broken_by_interctc_conditioning_falls_back_to_one_pass_per_layer(batch):
    """With interCTC self-conditioning a block's input is not the previous block's output:
    the block-by-block method must not be used, and the statistics stay exact."""
    from espnet_dynres.asr.batchnorm_restat import BatchNormRestat, batchnorm_layers, encoder_blocks

    conf = dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=3, input_layer="conv2d",
                interctc_layer_idx=[1], interctc_use_conditioning=True)
    model = build_tiny_model(model="dynres", specaug="dynres", specaug_conf=SPECAUG_CONF, encoder_conf=conf,
                             model_conf=dict(ctc_weight=0.3, interctc_weight=0.3))
    train_step(model, batch)
    torch.nn.Module.train(model, False)
    sample = model._batchnorm_restat
    run = lambda s: BatchNormRestat._run_to_layer(lambda x: model.encode(x, torch.full((x.shape[0],), x.shape[1])), (s,))
    order, calls = sample._trace(run, sample.batches(model.batchnorm_restat_budget)[0], batchnorm_layers(model),
                                 encoder_blocks(model))
    assert len(order) == 3 and [c[0] for c in calls] == [0, 1, 2]
    assert sample._block_chain(order, encoder_blocks(model), calls) is None
    _, (blockwise, per_layer) = _restat_both_ways(model, batch, encoder_blocks)
    for (ma, va), (mb, vb) in zip(blockwise, per_layer):
        assert torch.equal(ma, mb) and torch.equal(va, vb)


def _uneven_worker(rank: int, init_file: str, out_dir: str, batch) -> None:
    import datetime
    import os

    import torch.distributed as dist

    import espnet_dynres  # noqa: F401  (registers the plugin's names in this process)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    model = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=8))
    if rank == 0:  # only rank 0 had a training step this epoch: rank 1's sample is empty
        speech, lengths, text, text_lengths = batch
        model.train()(speech, lengths, text.clone(), text_lengths)
    before = [bn.running_var.clone() for bn in batchnorms(model)]  # as trained
    model.eval()  # every rank leaves training together, as before validation
    unchanged = all(torch.equal(a, bn.running_var) for a, bn in zip(before, batchnorms(model)))
    torch.save(unchanged, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.slow
def test_under_ddp_a_rank_without_a_sample_skips_the_re_estimate_on_every_rank(batch, tmp_path):
    """The re-estimate adds its sums over the ranks once per layer: a rank with an empty sample must not
    leave the others waiting. The decision is collective: no rank re-estimates, and none hangs."""
    import torch.multiprocessing as mp

    mp.spawn(_uneven_worker, args=(str(tmp_path / "init"), str(tmp_path), batch), nprocs=2, join=True)
    assert torch.load(tmp_path / "rank0.pt") is True and torch.load(tmp_path / "rank1.pt") is True
