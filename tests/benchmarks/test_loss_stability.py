"""benchmarks/loss_stability.py: per-step figures of synthetic ESPnet logs with known answers."""

import datetime
import json
import math
import statistics

import pytest

from factory import REPO_ROOT, load_script

SCRIPT = REPO_ROOT / "benchmarks" / "loss_stability.py"
T0 = datetime.datetime(2026, 12, 2, 8, 0, 0)
STEPS_PER_EPOCH = 6
WARMUP = 4  # iterations 1-4 are warm-up, 5-12 are after it
GRAD_CLIP = 5.0

# Tokens per utterance N/B of the 12 steps (both arms see the same batches); B cycles so N differs too.
RATIO = [3, 5, 7, 9] + [2, 4, 6, 8, 10, 12, 14, 16]
SIZE = [2, 4, 1, 3] * 3
TOKENS = [r * b for r, b in zip(RATIO, SIZE)]
# Warm-up steps have huge norms: any figure that includes them is far off.
WARMUP_GRAD = [1510.0, 900.0, 800.0, 700.0]
# token_normalized: two levels in a pattern uncorrelated with N/B -> CV 1/3, clipped 1/2, corr 0.
TN_GRAD = WARMUP_GRAD + [3, 6, 6, 3, 3, 6, 6, 3]
TN_LOSS = [4.0, 4.0, 4.0, 4.0] + [2, 1, 2, 1, 2, 1, 2, 1]  # per token: |log ratio| = log 2 at every step
# ESPnet loss: grad_norm = N/B / 2 -> CV of 1..8, clipped 3/8 (5.0 is not > 5), corr 1 and 1.
ESP_GRAD = WARMUP_GRAD + [r / 2 for r in RATIO[4:]]
ESP_PER_TOKEN = [3.0] * 4 + [1.5] * 8  # logged per utterance: 1.5 * N / B, so the per-token loss is flat


def load():
    return load_script(SCRIPT)


def fmt(x):
    """ESPnet's number format: 3 decimals, scientific for large or zero values."""
    return f"{x:.3e}" if x == 0 or abs(x) >= 1000 else f"{x:.3f}"


def stamp(seconds):
    t = T0 + datetime.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%d %H:%M:%S") + f",{t.microsecond // 1000:03d}"


def write_arm(path, model, grads, losses, tokens=None, sizes=None, seed=0, steps_per_epoch=STEPS_PER_EPOCH,
              averaged=False, batch_bins=1000000):
    """An exp dir: config.yaml and a train.log of ``len(grads) / steps_per_epoch`` epochs, one line a step."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(
        f"seed: {seed}\ngrad_clip: {GRAD_CLIP:g}\nlog_interval: {'null' if averaged else 1}\nbatch_type: numel\n"
        f"batch_bins: {batch_bins}\nscheduler: warmuplr\nscheduler_conf:\n    warmup_steps: {WARMUP}\n"
        f"model: {model}\nmodel_conf:\n    ctc_weight: 0.3\n")
    lines = ["Failed to import Flash Attention, using ESPnet default: No module named 'flash_attn'"]
    epochs = len(grads) // steps_per_epoch
    t = 0.0
    for e in range(1, epochs + 1):
        if averaged:
            lines.append(f"[vm] {stamp(t)} (trainer:811) INFO: {e}epoch:train:1-{steps_per_epoch}batch: "
                         f"iter_time=0.002, loss=1.000, grad_norm=3.000, clip=0.000e+00, train_time=1.0")
        for i in range(1, steps_per_epoch + 1):
            k = (e - 1) * steps_per_epoch + i - 1
            t += 1.0
            if averaged:
                continue
            counts = (f"batch_tokens={fmt(tokens[k])}, batch_size={fmt(sizes[k])}, empty_transcripts=0.000e+00, "
                      if tokens is not None else "")
            sep = "" if k == 5 else ", "  # a lost ", " as in real logs of parallel trainings
            lines.append(
                f"[vm] {stamp(t)} (trainer:811) INFO: {e}epoch:train:{i}-{i}batch: iter_time=0.002{sep}"
                f"forward_time=0.700, loss_ctc=9.000, loss_att=8.000, acc=0.170, loss={fmt(losses[k])}, {counts}"
                f"backward_time=0.700, grad_norm={fmt(grads[k])}, clip={fmt(100.0 if grads[k] > GRAD_CLIP else 0.0)}, "
                f"loss_scale=1.000, optim_step_time=0.024, optim0_lr0=3.080e-04, train_time=1.4")
        t += 0.5 if e == epochs else 1.0
        count = e * steps_per_epoch
        lines.append(
            f"[vm] {stamp(t)} (trainer:394) INFO: {e}epoch results: [train] iter_time=0.002, loss=2.000, "
            f"grad_norm=5.000, clip=50.000, time=6.5 seconds, total_count={count}, gpu_max_cached_mem_GB=0.0"
            f"[valid] loss_ctc=3.000, acc=0.200, loss=2.000, time=1.0 seconds, total_count=2, [att_plot] time=1.0 seconds")
    (path / "train.log").write_text("\n".join(lines) + "\n")
    return path


def tn_arm(path, grads=TN_GRAD, seed=0, **kw):
    return write_arm(path, "token_normalized", grads, TN_LOSS, TOKENS, SIZE, seed=seed, **kw)


def espnet_arm(path, grads=ESP_GRAD, seed=0, **kw):
    losses = [p * r for p, r in zip(ESP_PER_TOKEN, RATIO)]
    return write_arm(path, "espnet", grads, losses, seed=seed, **kw)


def run(tmp_path, *arms, extra=()):
    ls = load()
    out = tmp_path / "out"
    assert ls.main(["--out_dir", str(out), *[a for arm in arms for a in ("--arm", arm)], *extra]) == 0
    return json.loads((out / "loss_stability.json").read_text()), out


def test_key_values_read_glued_pairs_and_scientific_numbers():
    ls = load()
    kv = ls.key_values("iter_time=0.041forward_time=0.735, grad_norm=1.510e+03, clip=0.000e+00empty_transcripts=2.000,"
                       " optim0_lr0=3.080e-04, loss_ctc=51.134loss_att=2.319")
    assert kv == {"iter_time": 0.041, "forward_time": 0.735, "grad_norm": 1510.0, "clip": 0.0,
                  "empty_transcripts": 2.0, "optim0_lr0": 3.08e-4, "loss_ctc": 51.134, "loss_att": 2.319}


def test_paired_arms_give_the_constructed_figures(tmp_path):
    tn = tn_arm(tmp_path / "tn")
    esp = espnet_arm(tmp_path / "esp")
    # valid figures: one next to the checkpoints' side directory (time_to_accuracy.py), one in the exp dir
    (tn / "epochs").mkdir()
    (tn / "epochs" / "1epoch.valid_metrics.json").write_text(
        json.dumps({"stamp": {}, "metrics": {"ter_ctc_token": 0.8, "acc_token": 0.2}}))
    (tn / "2epoch.valid_metrics.json").write_text(json.dumps({"ter_ctc_token": 0.4, "acc_token": 0.5}))
    # test decoding: u1 5 s 1/2 wrong, u4 8 s 0/2, u2 20 s 0/4, u3 70 s 3/4 (2 del + 1 ins)
    score = tn / "decode_asr_ctc_greedy_valid.acc.ave" / "test" / "score"
    score.mkdir(parents=True)
    (score / "per_utt.tsv").write_text(
        "utt_id\tduration_sec\tref\thyp\tnum_ref_words\tsub\tdel\tins\twer\n"
        "u1\tNA\tone two\tone three\t2\t1\t0\t0\t50.00\n"
        "u2\tNA\ta b c d\ta b c d\t4\t0\t0\t0\t0.00\n"
        "u3\tNA\ta b c d\ta b x y\t4\t0\t2\t1\t75.00\n"
        "u4\tNA\tsix two\tsix two\t2\t0\t0\t0\t0.00\n")
    utt2dur = tmp_path / "utt2dur"
    utt2dur.write_text("u1 5.0\nu2 20.0\nu3 70.0\nu4 8.0\n")

    res, out = run(tmp_path, f"tn={tn}", f"espnet={esp}:tn", extra=("--utt2dur", str(utt2dur)))
    t = res["arms"]["tn"]["runs"]["0"]
    e = res["arms"]["espnet"]["runs"]["0"]
    for r in (t, e):
        assert r["steps"] == 12 and r["steps_after_warmup"] == 8 and r["warmup_steps"] == WARMUP
        assert r["wall_clock_sec"] == pytest.approx(12 * 1.0 + 1.0 + 0.5 - 1.0)  # first step line to last results
    # token_normalized: grad norms 3 and 6 in a pattern orthogonal to N/B
    assert t["grad_norm_cv"] == pytest.approx(1 / 3)
    assert t["clipped_share"] == pytest.approx(0.5) and t["clip_logged_share"] == pytest.approx(0.5)
    assert t["corr_grad_tokens_per_utt"] == pytest.approx(0.0, abs=1e-12)
    ratio = RATIO[WARMUP:]
    expected_log = statistics.correlation([math.log(g) for g in TN_GRAD[WARMUP:]], [math.log(r) for r in ratio])
    assert t["corr_log_grad_log_tokens_per_utt"] == pytest.approx(expected_log)
    assert t["loss_oscillation"] == pytest.approx(math.log(2))
    assert t["tokens_source"] == "own"
    # ESPnet's loss with tn's counts: grad_norm = (N/B) / 2
    assert e["grad_norm_cv"] == pytest.approx(statistics.pstdev(range(1, 9)) / 4.5)
    assert e["clipped_share"] == pytest.approx(3 / 8) and e["clip_logged_share"] == pytest.approx(3 / 8)
    assert e["corr_grad_tokens_per_utt"] == pytest.approx(1.0)
    assert e["corr_log_grad_log_tokens_per_utt"] == pytest.approx(1.0)
    assert e["loss_oscillation"] == pytest.approx(0.0, abs=1e-9)  # loss * B / N is flat
    assert e["tokens_source"] == "from tn"
    assert t["grad_norm_p95"] == pytest.approx(6.0) and e["grad_norm_p95"] == pytest.approx(7.65)  # 1..8: 1 + 0.95 * 7
    # per-token train loss per epoch: token-weighted
    n1, n2 = TOKENS[:6], TOKENS[6:]
    assert e["epochs"][0]["per_token_train_loss"] == pytest.approx(
        sum(p * n for p, n in zip(ESP_PER_TOKEN[:6], n1)) / sum(n1))
    assert e["epochs"][1]["per_token_train_loss"] == pytest.approx(1.5)
    assert t["epochs"][1]["per_token_train_loss"] == pytest.approx(
        sum(p * n for p, n in zip(TN_LOSS[6:], n2)) / sum(n2))
    # per epoch after warm-up: epoch 1 has steps 5, 6 (grad 3, 6) -> CV 1/3, half clipped
    assert t["epochs"][0]["steps_after_warmup"] == 2 and t["epochs"][0]["grad_norm_cv"] == pytest.approx(1 / 3)
    assert e["epochs"][1]["clipped_share"] == pytest.approx(3 / 6)  # 3, 4, 5, 6, 7, 8
    assert [x["valid_ter_ctc_token"] for x in t["epochs"]] == [0.8, 0.4]
    assert [x["valid_acc_token"] for x in t["epochs"]] == [0.2, 0.5]
    assert e["epochs"][0]["valid_ter_ctc_token"] is None  # none written for the espnet arm
    assert t["epochs"][1]["wall_clock_sec"] == pytest.approx(12.5)
    # test WER overall and by duration
    assert t["test"]["wer"] == pytest.approx(100 * 4 / 12)
    assert [b["wer"] for b in t["test"]["by_duration"]] == [pytest.approx(25.0), pytest.approx(0.0),
                                                            pytest.approx(75.0)]
    assert [b["utts"] for b in t["test"]["by_duration"]] == [2, 1, 1]
    assert e["test"] is None
    # the report files carry the same figures
    md = (out / "loss_stability.md").read_text()
    assert "optimizer step > warmup_steps" in md
    assert "| tn | 0 | 8 | 0.333 | 50.0 | 0.000 |" in md
    assert "| espnet | 0 | 8 | 0.509 | 37.5 | 1.000 | 1.000 | 0.000 |" in md
    assert "| 33.33 | 25.00 | 0.00 | 75.00 |" in md
    assert (out / "loss_stability.png").stat().st_size > 10000


def test_duration_edges_option_and_warmup_override(tmp_path):
    tn = tn_arm(tmp_path / "tn")
    score = tn / "decode_x" / "test" / "score"
    score.mkdir(parents=True)
    (score / "per_utt.tsv").write_text(  # durations from the file's own column
        "utt_id\tduration_sec\tref\thyp\tnum_ref_words\tsub\tdel\tins\twer\n"
        "u1\t5.000\tone two\tone three\t2\t1\t0\t0\t50.00\n"
        "u3\t70.000\ta b c d\ta b x y\t4\t0\t2\t1\t75.00\n"
        "u4\t8.000\tsix two\tsix two\t2\t0\t0\t0\t0.00\n")
    res, _ = run(tmp_path, f"tn={tn}", extra=("--duration_edges", "6", "--warmup_steps", "6"))
    r = res["arms"]["tn"]["runs"]["0"]
    assert [b["bin"] for b in r["test"]["by_duration"]] == ["[0, 6) s", "[6, inf) s"]
    assert [b["wer"] for b in r["test"]["by_duration"]] == [pytest.approx(50.0), pytest.approx(50.0)]
    assert r["steps_after_warmup"] == 6 and r["warmup_steps"] == 6
    assert r["clipped_share"] == pytest.approx(3 / 6)  # epoch 2: 3 6 6 3 3 6


def test_seeds_are_reported_each_and_averaged(tmp_path):
    tn0 = tn_arm(tmp_path / "tn0", seed=0)
    tn1 = tn_arm(tmp_path / "tn1", seed=1, grads=WARMUP_GRAD + [4, 4, 4, 4, 4, 4, 4, 8])
    esp0 = espnet_arm(tmp_path / "esp0", seed=0)
    esp1 = espnet_arm(tmp_path / "esp1", seed=1)
    res, out = run(tmp_path, f"tn={tn0}", f"tn={tn1}", f"espnet={esp0}:tn", f"espnet@s1={esp1}:tn@1")
    tn = res["arms"]["tn"]
    assert sorted(tn["runs"]) == ["0", "1"]
    cv1 = statistics.pstdev([4] * 7 + [8]) / 4.5
    assert tn["runs"]["1"]["grad_norm_cv"] == pytest.approx(cv1)
    assert tn["mean"]["seeds"] == 2 and tn["mean"]["grad_norm_cv"] == pytest.approx((1 / 3 + cv1) / 2)
    assert tn["mean"]["clipped_share"] == pytest.approx((0.5 + 1 / 8) / 2)
    esp = res["arms"]["espnet"]
    assert sorted(esp["runs"]) == ["0", "s1"] and esp["runs"]["s1"]["tokens_source"] == "from tn@1"
    assert esp["mean"]["corr_grad_tokens_per_utt"] == pytest.approx(1.0)
    assert [row["seeds"] for row in tn["mean"]["epochs"]] == [2, 2]
    md = (out / "loss_stability.md").read_text()
    assert f"| **tn** | mean of 2 | 8 | {(1 / 3 + cv1) / 2:.3f} |" in md
    assert "Mean over seeds per epoch" in md


def test_espnet_arm_without_counts_has_no_per_token_figures(tmp_path):
    res, _ = run(tmp_path, f"espnet={espnet_arm(tmp_path / 'esp')}")
    r = res["arms"]["espnet"]["runs"]["0"]
    assert r["grad_norm_cv"] == pytest.approx(statistics.pstdev(range(1, 9)) / 4.5)
    assert r["corr_grad_tokens_per_utt"] is None and r["loss_oscillation"] is None
    assert any("no token counts" in n for n in r["notes"])


def test_log_without_per_step_lines_is_an_error_naming_the_fix(tmp_path):
    exp = write_arm(tmp_path / "avg", "espnet", ESP_GRAD, ESP_PER_TOKEN, averaged=True)
    with pytest.raises(SystemExit, match=r"no per-step lines .*averag.*log_interval: 1"):
        load().main(["--out_dir", str(tmp_path / "out"), "--arm", f"avg={exp}"])


def test_missing_train_log_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no train.log"):
        load().main(["--out_dir", str(tmp_path / "out"), "--arm", f"x={tmp_path / 'empty'}"])


def test_step_lines_that_do_not_add_up_to_total_count_are_an_error(tmp_path):
    exp = tn_arm(tmp_path / "tn")
    log = exp / "train.log"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines() if "1epoch:train:3-3batch" not in line))
    with pytest.raises(SystemExit, match=r"epoch 1 has 5 step lines but ESPnet counted 6"):
        load().main(["--out_dir", str(tmp_path / "out"), "--arm", f"tn={exp}"])


def test_mismatched_step_counts_name_both_arms(tmp_path):
    tn = tn_arm(tmp_path / "tn")
    # 12 steps in epochs of 4: not the batches of the 6-step epochs
    esp = espnet_arm(tmp_path / "esp", steps_per_epoch=4)
    with pytest.raises(SystemExit, match=r"espnet@0 and arm tn@0.*epoch 1 has 4 steps in espnet@0 .* but 6 in tn@0"):
        load().main(["--out_dir", str(tmp_path / "out"), "--arm", f"tn={tn}", "--arm", f"espnet={esp}:tn"])


def test_different_batch_bins_cannot_lend_counts(tmp_path):
    tn = tn_arm(tmp_path / "tn")
    esp = espnet_arm(tmp_path / "esp", batch_bins=2000000)
    with pytest.raises(SystemExit, match=r"batch_bins is 2000000 vs 1000000"):
        load().main(["--out_dir", str(tmp_path / "out"), "--arm", f"tn={tn}", "--arm", f"espnet={esp}:tn"])


def test_unfinished_epoch_is_left_out(tmp_path):
    exp = tn_arm(tmp_path / "tn")
    log = exp / "train.log"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n")  # epoch 2 still running: its results line not yet written
    res, _ = run(tmp_path, f"tn={exp}")
    r = res["arms"]["tn"]["runs"]["0"]
    assert r["steps"] == 6 and r["steps_after_warmup"] == 2 and r["last_epoch"] == 1
    assert any("not finished" in n for n in r["notes"])


def test_help_works():
    with pytest.raises(SystemExit) as exc:
        load().main(["--help"])
    assert exc.value.code == 0


def test_a_resumed_run_appended_to_the_log_keeps_the_last_pass_of_an_epoch(tmp_path):
    exp = tn_arm(tmp_path / "tn")
    log = exp / "train.log"
    lines = log.read_text().splitlines()
    first_epoch2 = next(i for i, line in enumerate(lines) if "2epoch:train:1-1batch" in line)
    # a crashed first try of epoch 2 (huge norms), then the resumed run's full epoch 2
    crashed = [line.replace("grad_norm=", "grad_norm=9") for line in lines[first_epoch2:first_epoch2 + 3]]
    log.write_text("\n".join(lines[:first_epoch2] + crashed + lines[first_epoch2:]) + "\n")
    res, _ = run(tmp_path, f"tn={exp}")
    r = res["arms"]["tn"]["runs"]["0"]
    assert r["steps"] == 12 and r["grad_norm_cv"] == pytest.approx(1 / 3)
    assert any("restarts" in n for n in r["notes"])


@pytest.mark.slow
@pytest.mark.parametrize("batch_type, batch_bins", [("numel", "40000"), ("dynres", "240")])
def test_planned_counts_are_the_counts_a_real_training_logged(tmp_path, caplog, batch_type, batch_bins):
    """Two real epochs of ``model: token_normalized`` (which logs N and B per step), the log then
    stripped of those two fields as ESPnet's own model writes it: ``:plan`` rebuilds the same counts
    step by step from config.yaml and the text shape file."""
    import logging
    import re

    from espnet2.tasks.asr import ASRTask

    from factory import training_data_args, write_data_dir

    train = write_data_dir(tmp_path / "train", count=12, start=300)
    valid = write_data_dir(tmp_path / "valid", count=2, start=330)
    exp = tmp_path / "exp"
    exp.mkdir()
    handler = logging.FileHandler(exp / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s (%(module)s:%(lineno)d) %(levelname)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    try:
        with caplog.at_level("INFO"):
            ASRTask.main(cmd=[
                "--config", str(REPO_ROOT / "conf" / "train_asr_conformer_dynres_ci.yaml"), "--output_dir", str(exp),
                "--ngpu", "0", "--num_workers", "0", "--batch_type", batch_type, "--batch_bins", batch_bins,
                "--max_epoch", "2", "--log_interval", "1", "--normalize", "none", "--use_tensorboard", "false",
                *training_data_args(train, valid),
            ])  # fmt: skip
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    ls = load()
    logged = ls.read_train_log(exp)
    counts = [(s["batch_tokens"], s["batch_size"]) for e in logged.epochs for s in e.steps]
    assert len(logged.epochs) == 2 and len(counts) >= 6 and len(set(counts)) > 1
    stripped = tmp_path / "stripped"
    stripped.mkdir()
    (stripped / "config.yaml").write_text((exp / "config.yaml").read_text())
    text = re.sub(r"(, )?batch_(tokens|size)=[-0-9.e+]+", "", (exp / "train.log").read_text())
    (stripped / "train.log").write_text(text)
    res, _ = run(tmp_path, f"planned={stripped}:plan")
    planned = ls.read_train_log(stripped)
    spec = ls.parse_arms([f"planned={stripped}:plan"])[0]
    ls.planned_counts(spec, planned)
    assert [(s["batch_tokens"], s["batch_size"]) for e in planned.epochs for s in e.steps] == counts
    assert res["arms"]["planned"]["runs"]["0"]["tokens_source"] == "from plan"
    # a config that plans other batches than the log's is refused
    import yaml

    config = yaml.safe_load((exp / "config.yaml").read_text())
    config["batch_bins"] = int(batch_bins) // 2
    (stripped / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ls.ReportError, match=r"epoch 1 has \d+ steps in .* plans \d+ batches"):
        ls.planned_counts(ls.parse_arms([f"planned={stripped}:plan"])[0], ls.read_train_log(stripped))
