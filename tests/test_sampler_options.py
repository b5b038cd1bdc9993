"""Every option of ESPnet's sampler/iterator path is honoured or refused by name on the dynres path
(docs/options.md), and training and the audit CLI build the same batches from the same options."""

import pytest
import yaml

import espnet_dynres  # noqa: F401
from espnet2.tasks.asr import ASRTask
from espnet2.train.distributed_utils import DistributedOption
from espnet_dynres import batch_audit
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from factory import RECIPE_FRONTEND, task_args, write_data_dir


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_data_dir(tmp_path_factory.mktemp("options") / "data", count=40)


def train_sampler(args):
    factory = ASRTask.build_iter_factory(args, DistributedOption(distributed=False), mode="train")
    return factory.sampler


def test_max_batch_size_is_honoured_and_training_equals_the_audit(data_dir):
    args = task_args(data_dir, "--batch_bins", "3000", "--max_batch_size", "4", "--seed", "2")
    sampler = train_sampler(args)
    batches = [b.keys for b in sampler.planned_batches(1)]
    assert max(len(b) for b in batches) == 4 and sum(len(b) for b in batches) == 40
    policy = FrameRatePolicy(fs=16000, **{k: v for k, v in RECIPE_FRONTEND.items() if k == "hop_length"})
    audit = batch_audit.build_batches("dynres", data_dir / "speech_shape", data_dir / "text_shape.word",
                                      batch_bins=3000, max_batch_size=4, seed=2, policy=policy,
                                      utt2min_frames=sampler_min_frames(sampler))
    assert audit.epoch1 == batches and audit.epoch2 == [b.keys for b in sampler.planned_batches(2)]
    assert audit.plans == [b.plan for b in sampler.planned_batches(1)]


def sampler_min_frames(sampler):
    return dict(zip(sampler.keys, sampler.planner.min_frames.tolist()))


def test_oversized_and_shuffle_jitter_reach_the_sampler_from_the_command_line_and_yaml(data_dir, tmp_path):
    args = task_args(data_dir, "--batch_bins", "3000", "--shuffle_jitter", "0", "--oversized", "error")
    sampler = train_sampler(args)
    assert sampler.shuffle_jitter == 0.0 and sampler.oversized == "error"
    # jitter 0: the same groups every epoch (only their order is reshuffled)
    assert sorted(map(sorted, [b.keys for b in sampler.planned_batches(1)])) == sorted(map(sorted, [b.keys for b in sampler.planned_batches(2)]))
    assert train_sampler(task_args(data_dir, "--batch_bins", "3000")).shuffle_jitter == 0.5  # default when unset
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({"oversized": "error", "batch_bins": 30}))
    args = task_args(data_dir, "--config", str(config))
    assert args.oversized == "error"
    with pytest.raises(ValueError, match=r"utterance spk-\d+ .* more than batch_bins=30; raise batch_bins"):
        train_sampler(args)


def test_batch_fill_reaches_the_sampler_from_the_command_line_and_yaml(data_dir, tmp_path):
    assert train_sampler(task_args(data_dir, "--batch_bins", "3000")).batch_fill == "below"  # default when unset
    assert train_sampler(task_args(data_dir, "--batch_bins", "3000", "--batch_fill", "nearest")).batch_fill == "nearest"
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({"batch_fill": "nearest", "batch_bins": 3000}))
    assert train_sampler(task_args(data_dir, "--config", str(config))).batch_fill == "nearest"
    with pytest.raises(ValueError, match="batch_fill: below applies to batch_type dynres only"):
        train_sampler(task_args(data_dir, "--batch_type", "numel", "--batch_fill", "below"))


def test_dynres_only_options_are_refused_with_another_batch_type(data_dir):
    args = task_args(data_dir, "--batch_type", "numel", "--oversized", "warn")
    with pytest.raises(ValueError, match="oversized: warn applies to batch_type dynres only"):
        train_sampler(args)


def test_an_iterator_that_ignores_batch_samplers_is_refused_before_the_model_is_built(data_dir):
    args = task_args(data_dir, "--batch_bins", "3000", "--iterator_type", "chunk")
    with pytest.raises(ValueError, match="batch_type dynres needs iterator_type: sequence"):
        ASRTask.build_model(args)


def test_a_blank_line_stops_the_iterator_build_before_espnet_reads_the_file(data_dir, tmp_path):
    import shutil

    broken = tmp_path / "data"
    shutil.copytree(data_dir, broken)
    lines = (broken / "text").read_text().splitlines()
    (broken / "text").write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n")
    args = task_args(broken, "--batch_bins", "3000")
    with pytest.raises(ValueError, match=r"text:3: blank line.*not enough values to unpack.*sed -i"):
        ASRTask.build_iter_factory(args, DistributedOption(distributed=False), mode="train")
