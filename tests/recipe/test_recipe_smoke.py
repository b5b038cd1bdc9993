"""A short run of every stage of egs2/fsdd_digits/asr1 on a small subset (CI).

Uses conf/train_asr_conformer_dynres_ci.yaml (tiny Conformer, 1 epoch): this checks
that the stages run and hand over their outputs, not accuracy.
"""

import json
import re
import subprocess
import zipfile

import pytest

from factory import RECIPE_DIR

pytestmark = pytest.mark.slow  # recipe scripts

@pytest.mark.slow
def test_all_stages_on_a_small_subset(tmp_path):
    cmd = [
        "bash", str(RECIPE_DIR / "run.sh"),
        "--num_train", "40", "--num_dev", "8", "--num_test", "6",
        "--asr_config", "conf/train_asr_conformer_dynres_ci.yaml",
        "--datadir", str(tmp_path / "data"), "--dumpdir", str(tmp_path / "dump"),
        "--expdir", str(tmp_path / "exp"), "--inference_args", "--beam_size 2",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    for stage in (1, 3, 4, 5, 10, 11, 12, 13, 15):
        assert f"Stage {stage}:" in log, f"stage {stage} did not run"
    assert re.search(r"^WER \d+\.\d+ % \(test\)$", out.stdout, re.M), out.stdout[-2000:]

    exp = tmp_path / "exp" / "asr_train_asr_conformer_dynres_ci"
    config = (exp / "config.yaml").read_text()
    for switch in ("batch_type: dynres", "frontend: dynres", "model: token_normalized"):
        assert switch in config
    # Training used dynres batches and reported the token count.
    train_log = (exp / "train.log").read_text()
    assert "DynResBatchSampler" in train_log and "batch_tokens" in train_log
    # Decoding wrote a hypothesis for every test utterance; scoring counted them all.
    result = json.loads(next(exp.glob("decode_*/test/score/result.json")).read_text())
    assert result["num_utts"] == 6
    packed = exp / "train_asr_conformer_dynres_ci_packed.zip"
    assert "feats_stats.npz" in " ".join(zipfile.ZipFile(packed).namelist())
    assert "REF:" in out.stdout and "HYP:" in out.stdout  # decode_packed.py ran
    # Training reported its frame rates per epoch (train.log) and ESPnet plotted them.
    assert re.search(r"\[train\].*frame_rate_hz=.*at_min_frame_rate=.*at_max_frame_rate=.*padded_batch=", train_log)
    assert (exp / "images" / "frame_rate_hz.png").is_file()

    # The main job's command scores into the experiment and prints RESULTS, leaving the tracked
    # recipe README as it is (a user's checkout stays clean).
    readme = (RECIPE_DIR / "README.md").read_bytes()
    again = subprocess.run(["bash", str(RECIPE_DIR.parents[2] / "run_main.sh"), *cmd[2:], "--stage", "13",
                            "--stop_stage", "13"], capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert (RECIPE_DIR / "README.md").read_bytes() == readme
    assert "|dataset|Snt|Wrd|Corr|Sub|Del|Ins|Err|S.Err|" in again.stdout and (exp / "RESULTS.md").is_file()


@pytest.mark.slow
def test_longtail_corpus_runs_every_stage_with_a_long_utterance(tmp_path):
    """``--corpus longtail`` on a handful of utterances, one over a minute, decoded in segments."""
    cmd = [
        "bash", str(RECIPE_DIR / "run.sh"), "--corpus", "longtail",
        "--num_train", "5", "--num_dev", "2", "--num_test", "3",
        "--local_data_opts", "--median_sec 10 --sigma 1.5",
        "--asr_config", "conf/train_asr_conformer_dynres_ci.yaml",
        "--datadir", str(tmp_path / "data"), "--dumpdir", str(tmp_path / "dump"),
        "--expdir", str(tmp_path / "exp"), "--inference_args", "--max_segment_sec 15",
        "--stop_stage", "13",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    assert "longtail corpus" in log and "removed 0" in log  # no duration filter drops the long one
    train_sec = [float(line.split()[1]) for line in (tmp_path / "data" / "train" / "utt2dur").read_text().splitlines()]
    assert max(train_sec) > 60.0 and min(train_sec) < 6.0, train_sec
    exp = tmp_path / "exp" / "asr_train_asr_conformer_dynres_ci"
    train_log = (exp / "train.log").read_text()
    assert "DynResBatchSampler" in train_log and "1epoch results" in train_log
    # The longest training utterance is over batch_bins even at the lowest rate: trained alone and named.
    assert "over batch_bins even at their lowest rate" in train_log
    decode = next(exp.glob("decode_*/test"))
    assert json.loads((decode / "score" / "result.json").read_text())["num_utts"] == 3
    inference_logs = "".join(p.read_text() for p in decode.glob("logdir/asr_inference.*.log"))
    assert re.search(r"decoded in [2-9]\d* segments", inference_logs), inference_logs[-2000:]
