"""The plugin's trainer: the BatchNorm re-estimate as an explicit step before every validation,
collected from the training forwards, collective under DDP; ``model.eval()`` only switches the mode."""

import os

import pytest
import torch
from espnet2.train.distributed_utils import DistributedOption
from espnet2.train.reporter import Reporter
from espnet2.train.trainer import Trainer

from espnet_dynres.asr.batchnorm_reestimate import batchnorm_layers
from espnet_dynres.glue.trainer import DynResTrainer
from factory import build_tiny_model, build_tiny_model_and_reestimate, equal_length_batch, tiny_asr_args

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

SPECAUG_CONF = dict(apply_time_warp=False, apply_freq_mask=True, freq_mask_width_range=[0, 4], num_freq_mask=1,
                    apply_time_mask=False)
RESTAT_8 = dict(model="token_normalized", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=8))


@pytest.fixture(scope="module")
def batch():
    return equal_length_batch()


def forward(model, batch):
    speech, lengths, text, text_lengths = batch
    return model(speech, lengths, text.clone(), text_lengths)[0]


def statistics(model):
    return [(bn.running_mean.clone(), bn.running_var.clone()) for bn in batchnorm_layers(model)]


def test_build_model_trains_the_plugins_models_with_the_plugins_trainer_and_others_with_espnets():
    from espnet2.tasks.asr import ASRTask

    for model, trainer in (("dynres", DynResTrainer), ("token_normalized", DynResTrainer), ("espnet", Trainer)):
        build_tiny_model(model=model)
        assert ASRTask.trainer is trainer, model


def test_eval_runs_no_forward_pass(batch):
    model, reestimate = build_tiny_model_and_reestimate(**RESTAT_8)
    calls = []
    model.encoder.register_forward_pre_hook(lambda m, i: calls.append(1))
    model.train()
    with reestimate.collecting(model):
        forward(model, batch).backward()
    assert len(calls) == 1 and len(reestimate.sample) == 4
    before = statistics(model)
    model.eval()
    assert len(calls) == 1 and len(reestimate.sample) == 4  # a mode switch: no pass, nothing consumed
    assert all(torch.equal(a, bn.running_mean) for (a, _), bn in zip(before, batchnorm_layers(model)))
    assert reestimate.run(model) == 2 and len(calls) > 1 and len(reestimate.sample) == 0


def test_only_training_forwards_inside_collecting_are_kept(batch):
    model, reestimate = build_tiny_model_and_reestimate(**RESTAT_8)
    model.train()
    forward(model, batch)  # outside the trainer's epoch: nothing kept
    with reestimate.collecting(model):
        with torch.no_grad():  # collect-stats style: train mode without gradients
            forward(model, batch)
        model.eval()
        forward(model, batch)  # evaluation
    assert len(reestimate.sample) == 0
    before = statistics(model)
    assert reestimate.run(model) == 0  # no sample: nothing changes
    assert all(torch.equal(a, bn.running_var) for (_, a), bn in zip(before, batchnorm_layers(model)))


def test_training_is_unchanged_by_the_re_estimate(batch):
    """Training-mode BatchNorm uses batch statistics, so the re-estimate changes no training step."""
    losses = {}
    for k in (0, 8):
        model, reestimate = build_tiny_model_and_reestimate(
            model="token_normalized", model_conf=dict(ctc_weight=0.3, batchnorm_restat_batches=k),
            specaug="dynres", specaug_conf=SPECAUG_CONF)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        steps = []
        for _ in range(2):
            opt.zero_grad()
            model.train()
            with reestimate.collecting(model):
                loss = forward(model, batch)
            loss.backward()
            steps.append(float(loss.detach()))
            opt.step()
            assert reestimate.run(model) == (2 if k else 0)  # before validation, as the trainer does
        losses[k] = steps
    assert losses[0] == losses[8]


def test_a_model_without_batchnorm_keeps_nothing(batch):
    model, reestimate = build_tiny_model_and_reestimate(
        model="token_normalized", encoder_conf=dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=2,
                                                    input_layer="conv2d", use_cnn_module=False))
    model.train()
    with reestimate.collecting(model):
        forward(model, batch)
    assert not batchnorm_layers(model) and len(reestimate.sample) == 0 and reestimate.run(model) == 0


def test_the_trainer_re_estimates_between_espnets_training_and_validation_epochs(batch):
    """ESPnet's ``train_one_epoch`` and ``validate_one_epoch``, called as ``Trainer.run`` calls them:
    the validation forward already sees the re-estimated statistics."""
    args = tiny_asr_args(**RESTAT_8)
    model, _ = build_tiny_model_and_reestimate(**RESTAT_8)
    options = DynResTrainer.build_options(args)
    speech, lengths, text, text_lengths = batch
    items = [(["a", "b", "c", "d"], dict(speech=speech, speech_lengths=lengths, text=text.clone(),
                                         text_lengths=text_lengths))]
    reporter = Reporter()
    reporter.set_epoch(1)
    with reporter.observe("train") as sub:
        DynResTrainer.train_one_epoch(model=model, optimizers=[torch.optim.SGD(model.parameters(), lr=0.1)],
                                      schedulers=[None], iterator=items, reporter=sub, scaler=None,
                                      summary_writer=None, options=options, distributed_option=DistributedOption())
    assert len(options.batchnorm_reestimate.sample) == 4
    seen = []
    layer = batchnorm_layers(model)[0]
    layer.register_forward_pre_hook(lambda m, i: seen.append(m.running_mean.clone()))
    trained = layer.running_mean.clone()
    items = [(ids, dict(b, text=text.clone())) for ids, b in items]
    with reporter.observe("valid") as sub:
        DynResTrainer.validate_one_epoch(model=model, iterator=items, reporter=sub, options=options,
                                         distributed_option=DistributedOption())
    assert len(options.batchnorm_reestimate.sample) == 0  # cleared for the next epoch
    assert not torch.equal(seen[-1], trained) and torch.equal(seen[-1], layer.running_mean)


def _ddp_worker(rank: int, init_file: str, out_dir: str, batch, uneven: bool) -> None:
    import datetime

    import torch.distributed as dist

    import espnet_dynres  # noqa: F401  (registers the plugin's names in this process)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    model, reestimate = build_tiny_model_and_reestimate(**RESTAT_8)
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    ddp.train()
    if not uneven:
        with reestimate.collecting(ddp):
            forward(ddp, tuple(t[rank::2].clone() for t in batch)).backward()  # ESPnet's split
    elif rank == 0:  # only rank 0 had a training step this epoch (outside DDP: no collective)
        with reestimate.collecting(model):
            forward(model, batch)
    before = statistics(model)  # as trained
    reestimate.run(ddp)  # on every rank, before validation
    after = statistics(model)
    unchanged = all(torch.equal(a[1], b[1]) for a, b in zip(before, after))
    torch.save((after, unchanged), os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.slow
def test_under_ddp_the_statistics_are_those_of_every_ranks_sample(batch, tmp_path):
    """Two gloo processes, each with half the batch, end with the statistics of the whole sample."""
    import torch.multiprocessing as mp

    mp.spawn(_ddp_worker, args=(str(tmp_path / "init"), str(tmp_path), batch, False), nprocs=2, join=True)
    ranks, _ = torch.load(tmp_path / "rank0.pt")
    model, reestimate = build_tiny_model_and_reestimate(**RESTAT_8)
    model.train()
    with reestimate.collecting(model):  # one process holding all four utterances
        forward(model, batch).backward()
    reestimate.run(model)
    half, half_step = build_tiny_model_and_reestimate(**RESTAT_8)
    half.train()
    with half_step.collecting(half):  # rank 0's half alone
        forward(half, tuple(t[0::2].clone() for t in batch)).backward()
    half_step.run(half)
    for (mean, var), bn, (mean0, _) in zip(ranks, batchnorm_layers(model), statistics(half)):
        torch.testing.assert_close(mean, bn.running_mean, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(var, bn.running_var, rtol=1e-4, atol=1e-5)
        assert float((mean.double() - mean0.double()).abs().max()) > 1e-3  # rank 0's own half alone differs


@pytest.mark.slow
def test_under_ddp_a_rank_without_a_sample_skips_the_re_estimate_on_every_rank(batch, tmp_path):
    """The re-estimate adds its sums over the ranks once per layer: a rank with an empty sample must not
    leave the others waiting. The decision is collective: no rank re-estimates, and none hangs."""
    import torch.multiprocessing as mp

    mp.spawn(_ddp_worker, args=(str(tmp_path / "init"), str(tmp_path), batch, True), nprocs=2, join=True)
    assert torch.load(tmp_path / "rank0.pt")[1] is True and torch.load(tmp_path / "rank1.pt")[1] is True
