"""CTC safety: lowering frame rates never leaves an utterance fewer encoder frames than its transcript needs."""

import subprocess
import sys

import pytest
import yaml

from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.core.ctc_minimum import ctc_frames_needed, encoder_frames, min_feature_frames
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import RECIPE_FRONTEND, FSDD_DIR, RECIPE_DIR, REPO_ROOT, write_shape_files, standard_count

pytestmark = pytest.mark.slow  # runs recipe stages

DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def test_no_recipe_training_utterance_becomes_ctc_infeasible(tmp_path):
    # The recipe's default training corpus (planned without audio: durations and transcripts).
    subprocess.run(
        [sys.executable, str(RECIPE_DIR / "local" / "data_prep.py"), "--fsdd_dir", str(FSDD_DIR),
         "--out_dir", str(tmp_path / "data"), "--no_audio"],
        check=True, capture_output=True,
    )
    utt2dur = dict(line.split() for line in (tmp_path / "data" / "train" / "utt2dur").read_text().splitlines())
    texts = dict(line.split(maxsplit=1) for line in (tmp_path / "data" / "train" / "text").read_text().splitlines())
    keys = sorted(utt2dur)
    samples = [int(round(float(utt2dur[k]) * 16000)) for k in keys]
    shape_files, _ = write_shape_files(tmp_path, samples)
    renamed = {f"utt{i:06d}": keys[i] for i in range(len(keys))}

    conf = yaml.safe_load((REPO_ROOT / "conf" / "train_asr_conformer_dynres_cpu.yaml").read_text())
    frontend = DynResFrontend(**conf["frontend_conf"])
    input_layer = conf["encoder_conf"]["input_layer"]
    need = {}
    for short, key in renamed.items():
        ids = [DIGITS.index(w) for w in texts[key].split()]
        need[short] = ctc_frames_needed(ids)
    sampler = DynResBatchSampler(
        batch_bins=conf["batch_bins"], shape_files=shape_files, policy=frontend.policy,
        utt2min_frames={k: min_feature_frames(v, input_layer) for k, v in need.items()},
    )
    utt2samples = dict(zip(renamed, samples))
    lowered = 0
    for batch in sampler.planned_batches(1):
        t = batch.plan.num_frames
        for k in batch.keys:
            assert encoder_frames(t, input_layer) >= need[k], (renamed[k], t, need[k])
            lowered += t < standard_count(frontend.policy, utt2samples[k])
    assert lowered > len(keys) // 4  # rates really were lowered for many utterances


def test_sampler_raises_the_rate_when_the_transcript_needs_it(tmp_path):
    # Two utterances: 2.0 s with 1 token and 1.2 s with a dense transcript.
    shape_files, utt2samples = write_shape_files(tmp_path, [32000, 19200])
    policy = DynResFrontend(**RECIPE_FRONTEND).policy
    free = DynResBatchSampler(batch_bins=10000, shape_files=shape_files, policy=policy)
    assert len(free) == 1  # grouped: the 2.0 s utterance goes down to ~T frames
    t = free.planned_batches(1)[0].plan.num_frames
    dense = {"utt000000": t + 5, "utt000001": 1}  # the longer one would be lowered below its need
    safe = DynResBatchSampler(batch_bins=10000, shape_files=shape_files, policy=policy, utt2min_frames=dense)
    assert len(safe) == 2  # not grouped: each keeps its standard rate
