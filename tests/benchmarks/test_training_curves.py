"""benchmarks/training_curves.py: ESPnet train.log parsing and the fair-metrics join."""

import json

import pytest

from factory import REPO_ROOT, load_script

SCRIPT = REPO_ROOT / "benchmarks" / "training_curves.py"

# Two epoch summaries in ESPnet 202511's format (trainer.py, "Nepoch results").
LOG = """\
[vm] 2026-11-30 12:28:29,112 (trainer:394) INFO: 1epoch results: [train] iter_time=0.004, loss_ctc=38.021, acc=0.169, grad_norm=191.366, clip=75.148, train_time=1.838, time=5 minutes and 10.75 seconds, total_count=169, [valid] loss_ctc=13.720, cer_ctc=1.000, acc=0.284, loss=11.265, time=5.28 seconds, total_count=9
[vm] 2026-11-30 12:28:30,000 (trainer:811) INFO: 2epoch:train:1-20batch: iter_time=0.002, loss_ctc=5.0, grad_norm=9.0, clip=50.000
[vm] 2026-11-30 12:33:40,000 (trainer:394) INFO: 2epoch results: [train] loss_ctc=5.854, acc=0.4, grad_norm=1.5e+01, clip=82.000, time=1 hour, 2 minutes and 3.5 seconds, total_count=338, [valid] loss_ctc=1.224, cer_ctc=0.112, acc=0.462, time=5.1 seconds, total_count=18
"""


def load():
    return load_script(SCRIPT)


def test_epoch_results_are_parsed_with_times_steps_and_clipping(tmp_path):
    tc = load()
    (tmp_path / "train.log").write_text(LOG)
    run = tc.read_run("arm", tmp_path)
    assert run.epochs == [1, 2]
    assert run.steps == [169, 338]
    assert run.train_seconds == [pytest.approx(310.75), pytest.approx(3723.5)]
    assert run.cumulative_seconds[-1] == pytest.approx(310.75 + 3723.5)
    assert run.wall_seconds == [pytest.approx(0.0), pytest.approx(310.888)]  # from the log's first time stamp
    assert run.clip_pct == [pytest.approx(75.148), pytest.approx(82.0)]
    assert run.grad_norm[1] == pytest.approx(15.0)
    assert run.valid[1]["cer_ctc"] == pytest.approx(0.112) and run.valid[0]["acc"] == pytest.approx(0.284)


def test_a_log_without_finished_epochs_is_an_error(tmp_path):
    tc = load()
    (tmp_path / "train.log").write_text(LOG.splitlines()[1] + "\n")
    with pytest.raises(ValueError, match="no finished epoch"):
        tc.read_run("arm", tmp_path)


def test_fair_metrics_join_by_name_and_epoch_and_drive_the_table(tmp_path):
    tc = load()
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "train.log").write_text(LOG)
    fair = tmp_path / "fair.json"
    fair.write_text(json.dumps({"arm@2": {"acc_token": 0.323, "ter_ctc_token": 0.036}, "other@2": {"acc_token": 0.9}}))
    md = tmp_path / "table.md"
    assert tc.main(["--run", f"arm={tmp_path / 'exp'}", "--valid_json", str(fair), "--markdown", str(md),
                    "--png", str(tmp_path / "curves.png")]) == 0
    rows = md.read_text().splitlines()
    assert "| arm | 2 | 338 |" in rows[-1] and "| 0.323 | 0.036 |" in rows[-1]
    assert "| — | — |" in rows[-2]  # epoch 1 has no fair figures
    assert (tmp_path / "curves.png").stat().st_size > 0
