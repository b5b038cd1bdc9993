"""Same seed, same run; an interrupted run resumed with ``--resume true`` ends where an uninterrupted one does.

Drives ESPnet's real trainer (``ASRTask.main``, in this process to save the
import) on the CI config (``conf/train_asr_conformer_dynres_ci.yaml``: dynres
sampler, dynres frontend, token-normalized model) with a handful of real FSDD
utterances, ``--num_workers 0``.
"""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch
import yaml

from espnet2.tasks.asr import ASRTask
from espnet2.train.distributed_utils import DistributedOption
from factory import REPO_ROOT, training_data_args, write_data_dir

pytestmark = pytest.mark.slow  # whole trainings

CONFIG = REPO_ROOT / "conf" / "train_asr_conformer_dynres_ci.yaml"
NUM_TRAIN = 8
BATCH_BINS = 150  # frames: several batches of two or three single-digit utterances


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("repro_data")
    return {
        "train": write_data_dir(root / "train", count=NUM_TRAIN, start=300),
        "valid": write_data_dir(root / "valid", count=2, start=400),
    }


def train(data: Dict[str, Path], out_dir: Path, *extra: str) -> Path:
    train_dir, valid_dir = data["train"], data["valid"]
    ASRTask.main(
        cmd=[
            "--config", str(CONFIG), "--output_dir", str(out_dir), "--ngpu", "0", "--num_workers", "0",
            *training_data_args(train_dir, valid_dir),
            "--frontend_conf", "fs=16k", "--batch_bins", str(BATCH_BINS), "--log_interval", "1",
            "--use_tensorboard", "false", "--keep_nbest_models", "10", *extra,
        ]
    )  # fmt: skip
    return out_dir


def checkpoint(out_dir: Path) -> dict:
    return torch.load(out_dir / "checkpoint.pth", map_location="cpu", weights_only=False)


def first_step_loss(records: List[logging.LogRecord]) -> float:
    """The loss ESPnet logs for iteration 1 of epoch 1 (``--log_interval 1``)."""
    for record in records:
        message = record.getMessage()
        if message.startswith("1epoch:train:1-1batch:"):
            return float(re.search(r"\bloss=([-0-9.e+]+)", message)[1])
    raise AssertionError("no log line for the first training step")


def epoch_batches(out_dir: Path, epoch: int, seed: Optional[int] = None) -> List[tuple]:
    """The batches (utterance ids, in order) ESPnet's iterator gives in ``epoch`` with this run's config."""
    with open(out_dir / "config.yaml", encoding="utf-8") as f:
        args = argparse.Namespace(**yaml.safe_load(f))
    if seed is not None:
        args.seed = seed
    factory = ASRTask.build_iter_factory(args=args, distributed_option=DistributedOption(), mode="train")
    loader = factory.build_iter(epoch)
    if loader.batch_sampler is None:  # batch_type dynres: one item per planned batch, (id, planned frames) each
        return [tuple(zip(b.keys, b.plan.frames)) for b in loader.sampler]
    return [tuple(b) for b in loader.batch_sampler]


def assert_same_state(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor], atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if atol == 0.0:
            assert torch.equal(a[key], b[key]), key
        else:
            torch.testing.assert_close(a[key], b[key], atol=atol, rtol=1e-5, msg=key)


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    """A 1-epoch run and a 2-epoch run, both seed 0 (so the same first epoch); the first resumed to 2 epochs."""
    root = tmp_path_factory.mktemp("repro_runs")
    handler = _Collect()
    logging.getLogger().addHandler(handler)
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.INFO)
    try:
        out = {}
        for name, epochs, seed in (("a", 1, 0), ("full", 2, 0)):
            handler.records = []
            out[name] = train(data, root / name, "--max_epoch", str(epochs), "--seed", str(seed))
            out[name + "_records"] = handler.records
        # Interrupted after epoch 1, resumed to 2 epochs.
        out["resumed"] = train(data, out["a"], "--max_epoch", "2", "--seed", "0", "--resume", "true")
        out["a_1epoch_state"] = torch.load(out["a"] / "1epoch.pth", map_location="cpu")
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(level)
    return out


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.INFO)
        self.records: List[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_same_seed_same_batches(runs):
    batches_a, batches_b = epoch_batches(runs["a"], 1), epoch_batches(runs["full"], 1)
    assert batches_a == batches_b
    assert len(batches_a) >= 3, "too few batches to test the order"
    # The batches are the seed's and the epoch's: another seed or epoch gives others,
    # and every training utterance is in exactly one batch of every epoch.
    others = [epoch_batches(runs["a"], 1, seed=1), epoch_batches(runs["a"], 2), epoch_batches(runs["a"], 3)]
    for batches in [batches_a] + others:
        keys = [k for batch in batches for k in batch]
        assert len(keys) == len(set(keys)) == NUM_TRAIN
    assert any(o != batches_a for o in others)


def test_same_seed_same_first_step_loss_and_same_checkpoint(runs):
    loss_a, loss_b = first_step_loss(runs["a_records"]), first_step_loss(runs["full_records"])
    assert loss_a == loss_b
    assert loss_a > 0
    assert_same_state(runs["a_1epoch_state"], torch.load(runs["full"] / "1epoch.pth", map_location="cpu"))


def test_resumed_run_ends_where_the_uninterrupted_run_ends(runs):
    resumed, full = checkpoint(runs["resumed"]), checkpoint(runs["full"])
    assert_same_state(resumed["model"], full["model"], atol=1e-6)
    epoch_1 = runs["a_1epoch_state"]
    assert any(not torch.equal(epoch_1[k], full["model"][k]) for k in epoch_1), "epoch 2 changed nothing"
    for opt_resumed, opt_full in zip(resumed["optimizers"], full["optimizers"]):
        assert opt_resumed["state"].keys() == opt_full["state"].keys()
        for k in opt_full["state"]:
            assert_same_state(opt_resumed["state"][k], opt_full["state"][k], atol=1e-6)
    assert resumed["reporter"]["epoch"] == full["reporter"]["epoch"] == 2
    for epoch in (1, 2):
        for mode in ("train", "valid"):
            got, want = resumed["reporter"]["stats"][epoch][mode], full["reporter"]["stats"][epoch][mode]
            assert float(got["loss"]) == pytest.approx(float(want["loss"]), rel=1e-5), (epoch, mode)


def test_the_saved_config_records_the_value_of_every_omitted_plugin_option(runs):
    """The CI config sets none of the sampler options, no fallback or target rate and no
    batchnorm_restat_batches: config.yaml holds the values the run used, and a run from it plans the same."""
    import inspect

    from espnet_dynres.asr.dynres_model import DynResASRModel
    from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler

    given = yaml.safe_load(CONFIG.read_text())
    assert not {"oversized", "batch_fill", "shuffle_jitter"} & set(given)
    saved = yaml.safe_load((runs["a"] / "config.yaml").read_text())
    defaults = inspect.signature(DynResBatchSampler.__init__).parameters
    for name in ("oversized", "batch_fill", "shuffle_jitter"):
        assert saved[name] == defaults[name].default and saved[name] is not None
    assert saved["frontend_conf"]["fallback_frame_rate_hz"] == 50.0  # 0.5 x the standard 100 Hz
    assert saved["frontend_conf"]["min_frame_rate_hz"] == 70.0 and saved["frontend_conf"]["method"] == "hop"
    assert "target_frame_rate_hz" in saved["frontend_conf"]
    restat_default = inspect.signature(DynResASRModel.__init__).parameters["batchnorm_restat_batches"].default
    assert saved["model_conf"]["batchnorm_restat_batches"] == restat_default
