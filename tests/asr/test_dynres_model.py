"""``model: dynres``: the sampler's plan and the frame rates travel as arguments, under either loss."""

import pytest
import torch

from espnet2.tasks.asr import ASRTask

from espnet_dynres.asr.dynres_model import DynResASRModel
from espnet_dynres.iterators.dynres_iter_factory import BATCH_PLAN_KEY
from espnet_dynres.glue.config_checks import check_sampler_arguments
from factory import build_tiny_model, pad_batch, plan_of, random_text, real_utterances, tiny_asr_args, common_frame_count, frame_range, frame_rate
from float_tolerance import assert_close_float32

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

SPECAUG_CONF = dict(apply_time_warp=False, apply_freq_mask=False, time_mask_width_range=[0, 4], num_time_mask=1)


@pytest.fixture(scope="module")
def batch():
    speech, lengths = pad_batch(real_utterances(3, concat=2))
    text, text_lengths = random_text(3, 4)
    return speech, lengths, text, text_lengths


def encoder_input_lengths(model):
    """Records the ``(B,)`` frame counts the encoder receives (after frontend, SpecAugment, normalize)."""
    seen = []
    model.encoder.register_forward_pre_hook(lambda m, args: seen.append(args[1].tolist()))
    return seen


@pytest.mark.parametrize("model_name", ["dynres", "token_normalized"])
def test_espnet_loss_or_per_token_loss_computes_exactly_the_planned_frames(batch, model_name):
    speech, lengths, text, text_lengths = batch
    model = build_tiny_model(model=model_name).train()
    seen = encoder_input_lengths(model)
    rule, _ = model.frontend.frame_counts(lengths)  # the policy's own T for this batch, without a plan
    highest = min(frame_range(model.frontend.policy, int(n))[1] for n in lengths)
    assert highest > int(rule[0])  # a different T is reachable, so the test can tell plan from rule
    plan = torch.full((3,), highest, dtype=torch.long)
    loss, stats, _ = model(speech, lengths, text.clone(), text_lengths, batch_plan=plan_of(plan), utt_id=["a", "b", "c"])
    assert seen[-1] == [highest] * 3 and torch.isfinite(loss)
    assert float(stats["frame_rate_fallback"]) == 0.0
    model(speech, lengths, text.clone(), text_lengths)  # without a plan: the policy's rule
    assert seen[-1] == rule.tolist()


def test_the_batch_key_is_the_models_argument():
    import inspect

    assert BATCH_PLAN_KEY in inspect.signature(DynResASRModel.forward).parameters
    assert BATCH_PLAN_KEY in inspect.signature(DynResASRModel.collect_feats).parameters


def test_model_dynres_is_espnets_model_and_loss(batch):
    # Same weights, ESPnet's DefaultFrontend and SpecAugment, train mode with the same dropout draws.
    speech, lengths, text, text_lengths = batch
    overrides = dict(frontend="default", frontend_conf={"n_mels": 20, "n_fft": 512, "win_length": 400,
                                                        "hop_length": 160}, model_conf=dict(ctc_weight=0.3))
    ours = build_tiny_model(model="dynres", **overrides).train()
    stock = build_tiny_model(model="espnet", **overrides).train()
    stock.load_state_dict(ours.state_dict())
    torch.manual_seed(3)
    loss, stats, weight = ours(speech, lengths, text.clone(), text_lengths)
    torch.manual_seed(3)
    ref, ref_stats, ref_weight = stock(speech, lengths, text.clone(), text_lengths)
    assert torch.equal(loss, ref) and torch.equal(weight, ref_weight)
    assert set(stats) == set(ref_stats) and all(
        (stats[k] is None and ref_stats[k] is None) or torch.equal(torch.as_tensor(stats[k]), torch.as_tensor(ref_stats[k]))
        for k in stats
    )


def test_specaug_gets_the_frontends_rates_as_an_argument(batch):
    speech, lengths, text, text_lengths = batch
    model = build_tiny_model(model="dynres", specaug="dynres", specaug_conf=SPECAUG_CONF).train()
    assert model.specaug is None and model.dynres_specaug is not None  # applied by the model, with the rates
    calls = []
    model.dynres_specaug.register_forward_pre_hook(
        lambda m, args, kwargs: calls.append(kwargs.get("frame_rate_ratios")), with_kwargs=True
    )
    plan = model.frontend.frame_counts(lengths)[0]
    model(speech, lengths, text.clone(), text_lengths, batch_plan=plan_of(plan))
    expected = model.frontend.features(speech, lengths, plan_of(plan)).frame_rates_hz / 100.0  # the frontend's own rates
    # the same float32 rates divided by the same 100.0: bit-identical
    assert len(calls) == 1 and torch.equal(calls[0], expected) and float(expected.max() - expected.min()) > 0.01
    model.eval()
    model(speech, lengths, text.clone(), text_lengths)  # validation: no SpecAugment
    model.train()
    model.collect_feats(speech, lengths, text, text_lengths)  # collect-stats: no SpecAugment
    assert len(calls) == 1


def test_no_plan_outlives_its_forward(batch):
    speech, lengths, text, text_lengths = batch
    model = build_tiny_model(model="dynres").train()
    highest = min(frame_range(model.frontend.policy, int(n))[1] for n in lengths)
    model(speech, lengths, text.clone(), text_lengths, batch_plan=plan_of([highest] * 3))
    assert model._step is None
    with pytest.raises(ValueError, match="same frontend_conf"):
        model(speech, lengths, text.clone(), text_lengths, batch_plan=plan_of([10**6] * 3))
    assert model._step is None
    seen = encoder_input_lengths(model)
    model(speech, lengths, text.clone(), text_lengths)
    assert seen[-1] == model.frontend.frame_counts(lengths)[0].tolist()  # the rule, not a stale plan


def test_a_plan_for_the_wrong_batch_or_frontend_is_refused(batch):
    speech, lengths, text, text_lengths = batch
    model = build_tiny_model(model="dynres").train()
    with pytest.raises(ValueError, match=r"batch_plan has 2 frame counts for speech_lengths \(3,\)"):
        model(speech, lengths, text.clone(), text_lengths, batch_plan=plan_of([100, 100]))
    plain = build_tiny_model(model="dynres", frontend="default", frontend_conf={"n_mels": 20}).train()
    with pytest.raises(ValueError, match="needs frontend: dynres"):
        plain(speech, lengths, text.clone(), text_lengths, batch_plan=plan_of([100, 100, 100]))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(batch_type="dynres"), "batch_type: dynres, frontend: dynres needs model: dynres"),
        (dict(), "frontend: dynres needs model: dynres"),
        (dict(frontend="default", frontend_conf={}, specaug="dynres", specaug_conf=SPECAUG_CONF),
         "specaug: dynres needs model: dynres"),
    ],
    ids=["batch_type", "frontend", "specaug"],
)
def test_dynres_switches_with_espnets_model_are_refused(overrides, message):
    args = tiny_asr_args(model="espnet", **{"frontend": "dynres", **overrides})
    with pytest.raises(ValueError, match=message):
        ASRTask.build_model(args)


def test_curriculum_needs_the_dynres_sampler():
    args = tiny_asr_args(model="dynres", batch_type="numel")
    args.frontend_conf = {**args.frontend_conf, "curriculum_epochs": 2}
    with pytest.raises(ValueError, match="curriculum_epochs: 2 is applied by the dynres sampler's plan"):
        check_sampler_arguments(args)
    args.batch_type = "dynres"
    check_sampler_arguments(args)


def test_the_frontend_alone_has_no_epoch_state():
    # The curriculum lives in the sampler's plan; the frontend without a plan always applies the rule.
    from espnet_dynres.asr.frontend.dynres import DynResFrontend

    frontend = DynResFrontend(curriculum_epochs=3, n_fft=512, win_length=400, hop_length=160).train()
    lengths = torch.tensor([16000, 20000, 24000])
    counts, _ = frontend.frame_counts(lengths)
    assert counts.tolist() == [common_frame_count(frontend.policy, lengths.tolist())] * 3
    assert common_frame_count(frontend.policy, lengths.tolist(), epoch=1) < int(counts[0])  # what a plan would hold


def test_model_dynres_is_registered_and_token_normalized_extends_it():
    from espnet2.asr.espnet_model import ESPnetASRModel
    from espnet2.tasks.asr import model_choices

    from espnet_dynres.asr.token_normalized_model import TokenNormalizedASRModel

    assert model_choices.get_class("dynres") is DynResASRModel
    assert issubclass(DynResASRModel, ESPnetASRModel) and issubclass(TokenNormalizedASRModel, DynResASRModel)


def test_espnets_loss_on_the_dynres_iterators_batches_computes_the_planned_frames(tmp_path):
    # The real path: ESPnet's iterator factory with batch_type dynres (and a curriculum), then
    # model: dynres on each batch as ESPnet's trainer calls it (model(**batch)).
    from espnet2.train.distributed_utils import DistributedOption

    from factory import task_args, write_data_dir

    data_dir = write_data_dir(tmp_path / "data", count=12, concat=2)
    args = task_args(data_dir, "--model", "dynres", "--grad_clip", "5", "--batch_bins", "1500",
                     "--frontend_conf", "curriculum_epochs=2")
    factory = ASRTask.build_iter_factory(args, DistributedOption(distributed=False), mode="train")
    model = build_tiny_model(model="dynres", batch_type="dynres", frontend_conf={"n_mels": 20, **args.frontend_conf}).train()
    seen = encoder_input_lengths(model)
    planned, rule = {}, {}
    for epoch in (1, 3):
        for _, batch in factory.build_iter(epoch):
            model(**batch)
            assert seen[-1] == list(batch[BATCH_PLAN_KEY].frames)  # exactly the plan
            planned[epoch] = planned.get(epoch, 0) + sum(seen[-1])
            rule[epoch] = rule.get(epoch, 0) + int(model.frontend.frame_counts(batch["speech_lengths"])[0].sum())
    assert planned[3] == rule[3]  # after the curriculum: the policy's rule
    assert planned[1] < rule[1]  # epoch 1 of the curriculum: lower rates, carried by the plan alone


@pytest.mark.parametrize("model_name", ["dynres", "token_normalized"])
def test_a_training_step_reports_its_frame_rates_and_validation_does_not(batch, model_name):
    """ESPnet's trainer averages the stats per epoch in train.log and plots each in <exp>/images."""
    speech, lengths, text, text_lengths = batch
    model = build_tiny_model(model=model_name).train()
    policy = model.frontend.policy
    lo = max(frame_range(policy, int(n))[0] for n in lengths)  # the longest member at the clamp's low end
    _, stats, _ = model(speech, lengths, text.clone(), text_lengths, batch_plan=plan_of([lo] * 3))
    rates = [frame_rate(policy, int(n), lo) for n in lengths]
    # the mean of the frontend's float32 rates: each rounded once from the float64 policy value
    assert_close_float32(float(stats["frame_rate_hz"]), sum(rates) / 3, reduction_length=1)
    lows = sum(frame_range(policy, int(n))[0] == lo for n in lengths)
    assert float(stats["at_min_frame_rate"]) == pytest.approx(lows / 3) and lows >= 1
    assert float(stats["at_max_frame_rate"]) == 0.0 and float(stats["padded_batch"]) == 0.0
    _, stats, _ = model(speech, lengths, text.clone(), text_lengths, batch_plan=plan_of(
        [frame_range(policy, int(n))[0] for n in lengths]))  # each at its own lowest count: padded
    assert float(stats["padded_batch"]) == 1.0
    with torch.no_grad():
        _, stats, _ = model.eval()(speech, lengths, text.clone(), text_lengths)
    assert "frame_rate_hz" not in stats
