"""Budgets that make sense, said once: a ``numel``-sized ``batch_bins`` under ``batch_type: dynres`` is
named with the dynres value that gives the same audio per step, and a budget too small for many
utterances gives one summary line with the ``below_clamp`` count and the smallest budget that keeps
every utterance inside the clamp."""

import logging

import pytest
import torch

import espnet_dynres  # noqa: F401
from espnet2.tasks.asr import ASRTask
from espnet2.train.distributed_utils import DistributedOption
from espnet_dynres import batch_audit
from espnet_dynres.samplers import batch_bins_search
from espnet_dynres.bin import audit_batches
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import plan_of, planned_below_clamp, task_args, write_data_dir, write_shape_files, frame_range

POLICY = FrameRatePolicy(fs=16000, hop_length=160)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_data_dir(tmp_path_factory.mktemp("budgets") / "data", count=120)


def train_sampler(args):
    return ASRTask.build_iter_factory(args, DistributedOption(distributed=False), mode="train").sampler


def test_a_numel_sized_budget_is_named_with_the_dynres_value_of_the_same_audio_per_step(data_dir, caplog):
    with caplog.at_level(logging.WARNING):
        sampler = train_sampler(task_args(data_dir, "--batch_bins", "200000"))
    lines = [r.getMessage() for r in caplog.records if "looks like a numel budget" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    suggested = int(lines[0].split("with that mean audio per batch is ")[1].split(" ")[0])
    numel = batch_audit.build_batches("numel", data_dir / "speech_shape", data_dir / "text_shape.word",
                                      batch_bins=200000).epoch1
    numel_sec = batch_bins_search.mean_audio_per_batch_sec(numel, sampler.utt2samples, 16000)
    dyn = sampler.with_batch_bins(suggested)
    dyn_sec = batch_bins_search.mean_audio_per_batch_sec([b.keys for b in dyn.planned_batches(1)], sampler.utt2samples, 16000)
    assert abs(dyn_sec / numel_sec - 1) < 0.1
    assert suggested < 200000 / 50  # the frames of numel's audio, not its samples


def test_a_frame_budget_is_not_mistaken_for_a_numel_one(data_dir, caplog):
    with caplog.at_level(logging.WARNING):
        train_sampler(task_args(data_dir, "--batch_bins", "3000"))
    assert "looks like a numel budget" not in caplog.text


def test_a_budget_too_small_gives_one_summary_line_and_counts_below_clamp(tmp_path, caplog):
    durations = [0.3 + 0.01 * i for i in range(60)]  # 31-90 standard frames, 22-63 at 70 Hz
    shape_files, _ = write_shape_files(tmp_path, [int(d * 16000) for d in durations])
    with caplog.at_level(logging.INFO):
        sampler = DynResBatchSampler(batch_bins=30, shape_files=shape_files, policy=POLICY)
        [b.keys for b in sampler.planned_batches(2)]
    summaries = [r for r in caplog.records if "below the clamp" in r.getMessage()]
    assert len(summaries) == 1 and summaries[0].levelno == logging.WARNING  # one line, not one per utterance
    message = summaries[0].getMessage()
    below = planned_below_clamp(sampler, 1)
    lowest_in_clamp = max(frame_range(POLICY, int(d * 16000))[0] for d in durations)
    assert f"{below} of 60 utterances planned below the clamp" in message
    assert f"smallest batch_bins that keeps every utterance inside the clamp is {lowest_in_clamp}" in message
    assert message.count("utterance utt") == 5 and "and " in message.split("frames")[-1]  # capped list of ids
    assert f"below_clamp={below} utterances" in repr(sampler)
    # the smallest budget it names keeps every utterance inside the clamp
    caplog.clear()
    inside = sampler.with_batch_bins(lowest_in_clamp)
    assert planned_below_clamp(inside, 1) == 0 and planned_below_clamp(inside, 3) == 0
    assert planned_below_clamp(sampler.with_batch_bins(lowest_in_clamp - 1), 1) >= 1


def test_below_clamp_is_the_one_definition_in_sampler_audit_and_training_stat(tmp_path, capsys):
    from factory import RECIPE_FRONTEND, build_tiny_model, pad_batch, random_text, real_utterances

    wavs = real_utterances(3, concat=4, start=200)
    shape_files, _ = write_shape_files(tmp_path, [w.numel() for w in wavs])
    bins = 60  # under every utterance's frames at 70 Hz (1.3-2 s: 90-140): each alone, below the clamp
    sampler = DynResBatchSampler(batch_bins=bins, shape_files=shape_files, policy=POLICY)
    assert planned_below_clamp(sampler, 1) == 3
    audit_batches.main(["--batch_type", "dynres", "--batch_bins", str(bins), "--speech_shape", shape_files[0],
                        "--hop_length", "160"])
    assert "below_clamp           : 3 of 3 utterances" in capsys.readouterr().out
    model = build_tiny_model(model="token_normalized")
    batch = dict(zip(sampler.keys, wavs))
    for keys, frames in zip([b.keys for b in sampler.planned_batches(1)], [b.plan.frames for b in sampler.planned_batches(1)]):
        speech, lengths = pad_batch([batch[k] for k in keys])
        text, text_lengths = random_text(len(keys), 2)
        model.train()
        _, stats, _ = model(speech, lengths, text, text_lengths, batch_plan=plan_of(frames))
        assert float(stats["below_clamp"]) == len(keys)
    assert RECIPE_FRONTEND["hop_length"] == POLICY.hop_length
