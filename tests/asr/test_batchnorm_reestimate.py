"""BatchNorm statistics re-estimated at the standard rate (:func:`reestimate_batchnorm`): the statistics
evaluation's own inputs have, block by block as exactly as layer by layer, within the evaluation budget."""

import copy
import tempfile
from pathlib import Path

import pytest
import torch

from espnet_dynres.asr import batchnorm_reestimate
from espnet_dynres.asr.batchnorm_reestimate import batchnorm_layers, encoder_blocks, reestimate_batchnorm
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import (equal_length_batch, TINY_ENCODER_REDUCTION_LENGTH, build_tiny_model_and_reestimate, frame_range, pad_batch,
                     plan_of, random_text, standard_count,
                     real_utterances, write_shape_files)
from float_tolerance import assert_close_float32

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

SPECAUG_CONF = dict(apply_time_warp=False, apply_freq_mask=True, freq_mask_width_range=[0, 4], num_freq_mask=1,
                    apply_time_mask=False)


@pytest.fixture(scope="module")
def batch():
    return equal_length_batch()


def train_step(model, reestimate, batch, speech_frames=None):
    """One training forward and backward, offered to the re-estimate's sample as the trainer does."""
    speech, lengths, text, text_lengths = batch
    model.train()
    with reestimate.collecting(model):
        loss, _, _ = model(speech, lengths, text.clone(), text_lengths, batch_plan=None if speech_frames is None else plan_of(speech_frames))
    loss.backward()
    return float(loss.detach())


def eval_input_statistics(model, wavs, with_peak=False):
    """Mean and unbiased variance over all frames of every BatchNorm layer's input, the utterances
    encoded one at a time in eval mode with the model's current statistics (independent of the
    function tested); ``with_peak``: and the input's largest magnitude."""
    frames = {bn: [] for bn in batchnorm_layers(model)}
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


def lowest_plan(model, lengths):
    return torch.full((len(lengths),), min(frame_range(model.frontend.policy, int(n))[0] for n in lengths))


@pytest.mark.parametrize("model_name", ["dynres", "token_normalized"])
def test_the_statistics_are_those_of_the_standard_rate_inputs_evaluation_sees(batch, model_name):
    speech, lengths, _, _ = batch
    model, reestimate = build_tiny_model_and_reestimate(
        model=model_name, model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=8))
    assert len(batchnorm_layers(model)) == 2  # one per Conformer block (convolution module)
    train_step(model, reestimate, batch, speech_frames=lowest_plan(model, lengths))  # far below the standard rate
    assert len(reestimate.sample) == 4  # all 4 are kept (8 batches of ESPnet's 20)
    assert reestimate_batchnorm(model, reestimate.sample, reestimate.budget) == 2
    expected = eval_input_statistics(model, [speech[b, : lengths[b]] for b in range(4)], with_peak=True)
    for bn, (mean, var, peak) in expected.items():
        assert_statistics_close(bn, mean, var, peak)


def test_without_the_re_estimate_the_statistics_are_the_training_average_and_differ(batch):
    """The check above can fail: ESPnet's running statistics (batchnorm_restat_batches: 0) are not those."""
    speech, lengths, _, _ = batch
    model, reestimate = build_tiny_model_and_reestimate(
        model="token_normalized", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=0))
    train_step(model, reestimate, batch, speech_frames=lowest_plan(model, lengths))
    assert len(reestimate.sample) == 0 and reestimate.run(model) == 0
    expected = eval_input_statistics(model, [speech[b, : lengths[b]] for b in range(4)], with_peak=True)
    gaps = [float((bn.running_mean.double() - mean).abs().max()) for bn, (mean, _, _) in expected.items()]
    assert max(gaps) > 1e-2
    with pytest.raises(AssertionError, match="not equal up to float32 rounding"):  # far beyond rounding
        for bn, (mean, var, peak) in expected.items():
            assert_statistics_close(bn, mean, var, peak)


def test_the_re_estimate_of_long_utterances_costs_no_more_than_validating_them():
    """Sixteen utterances 10x longer than the rest: every encoder call of the re-estimate is at most
    the largest batch the dynres validation grouping plans for the same utterances (padded
    standard-rate frames), where a fixed count of 16 would encode all long ones at once."""
    short = real_utterances(16, start=40)  # single digits, ~0.4 s
    long_ = real_utterances(16, concat=10, start=60)  # ten digits each, ~4.5 s
    wavs = short + long_
    valid_bins = 1500
    model, reestimate = build_tiny_model_and_reestimate(
        model="token_normalized", batch_type="dynres", batch_bins=3000, valid_batch_bins=valid_bins,
        model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=64))
    model.train()
    with reestimate.collecting(model):
        for group in (short, long_):
            speech, lengths = pad_batch(group)
            text, text_lengths = random_text(len(group), 4)
            model(speech, lengths, text, text_lengths)
    assert len(reestimate.sample) == 32
    calls = []
    hook = model.encoder.register_forward_pre_hook(lambda m, inputs: calls.append(tuple(inputs[0].shape[:2])))
    reestimate.run(model)
    hook.remove()
    with tempfile.TemporaryDirectory() as tmp:
        shape_files, _ = write_shape_files(Path(tmp), [w.numel() for w in wavs])
        valid = DynResBatchSampler(batch_bins=valid_bins, shape_files=shape_files, policy=model.frontend.policy,
                                   shuffle=False)
        valid_frames = max(p.cost_frames for p in [b.plan for b in valid.planned_batches(1)])
    long_frames = standard_count(model.frontend.policy, min(w.numel() for w in long_))
    assert 16 * long_frames > valid_frames  # what a fixed batch of 16 would have encoded
    assert calls and max(b * t for b, t in calls) <= valid_frames
    assert max(t for _, t in calls) >= long_frames  # the long utterances were encoded


def reestimate_both_ways(model, reestimate, batch):
    """After one training step, re-estimate ``model`` from the same sample block by block and, from the
    same starting statistics, with one pass per layer; returns the starting statistics and the two
    lists of ``(running_mean, running_var)`` per BatchNorm layer."""
    train_step(model, reestimate, batch)
    assert len(reestimate.sample) > 0
    layers = batchnorm_layers(model)
    start = [(bn.running_mean.clone(), bn.running_var.clone()) for bn in layers]
    results = []
    for block_by_block in (True, False):
        for bn, (mean, var) in zip(layers, start):
            bn.running_mean.copy_(mean)
            bn.running_var.copy_(var)
        sample = copy.deepcopy(reestimate.sample)
        assert reestimate_batchnorm(model, sample, reestimate.budget, block_by_block=block_by_block) == len(layers)
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
    model, reestimate = build_tiny_model_and_reestimate(model="dynres", specaug="dynres", specaug_conf=SPECAUG_CONF,
                                                        encoder_conf=encoder_conf)
    start, (blockwise, per_layer) = reestimate_both_ways(model, reestimate, batch)
    assert len(blockwise) == 3
    for (ma, va), (mb, vb) in zip(blockwise, per_layer):
        assert torch.equal(ma, mb) and torch.equal(va, vb)
    assert not torch.equal(start[-1][0], blockwise[-1][0])  # it did re-estimate


def test_block_by_block_runs_each_block_through_once_per_batch(batch):
    """Counting the encoder blocks that run to their end: one pass per layer runs the blocks
    before layer l again for every l (0 + 1 + 2 + 3 = 6 per batch with 4 blocks); block by block
    runs each block through once, the last not at all (3), plus the one traced pass (4)."""
    model, reestimate = build_tiny_model_and_reestimate(
        model="dynres", specaug="dynres", specaug_conf=SPECAUG_CONF,
        encoder_conf=dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=4, input_layer="conv2d"))
    train_step(model, reestimate, batch)
    completed = [0]
    handles = [b.register_forward_hook(lambda m, a, o: completed.__setitem__(0, completed[0] + 1))
               for b in encoder_blocks(model)]
    counts = {}
    for name, block_by_block in (("blockwise", True), ("per_layer", False)):
        completed[0] = 0
        reestimate_batchnorm(model, copy.deepcopy(reestimate.sample), reestimate.budget, block_by_block=block_by_block)
        counts[name] = completed[0]
    for h in handles:
        h.remove()
    n = len(reestimate.sample.batches(reestimate.budget))
    assert counts == {"per_layer": 4 + 6 * n, "blockwise": 4 + 3 * n}


def test_a_chain_broken_by_interctc_conditioning_falls_back_to_one_pass_per_layer(batch):
    """With interCTC self-conditioning a block's input is not the previous block's output:
    the block-by-block method must not be used, and the statistics stay exact."""
    conf = dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=3, input_layer="conv2d",
                interctc_layer_idx=[1], interctc_use_conditioning=True)
    model, reestimate = build_tiny_model_and_reestimate(model="dynres", specaug="dynres", specaug_conf=SPECAUG_CONF,
                                                        encoder_conf=conf,
                                                        model_conf=dict(ctc_weight=0.3, interctc_weight=0.3))
    train_step(model, reestimate, batch)
    model.eval()
    run = lambda s: batchnorm_reestimate._run_to_layer(lambda x: model.encode(x, torch.full((x.shape[0],), x.shape[1])),
                                                       (s,))
    first = reestimate.sample.batches(reestimate.budget)[0]
    order, calls = batchnorm_reestimate._trace(run, first, batchnorm_layers(model), encoder_blocks(model))
    assert len(order) == 3 and [c[0] for c in calls] == [0, 1, 2]
    assert batchnorm_reestimate._block_chain(order, encoder_blocks(model), calls) is None
    _, (blockwise, per_layer) = reestimate_both_ways(model, reestimate, batch)
    for (ma, va), (mb, vb) in zip(blockwise, per_layer):
        assert torch.equal(ma, mb) and torch.equal(va, vb)
