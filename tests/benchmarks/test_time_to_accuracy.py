"""benchmarks/time_to_accuracy.py: the target logic on synthetic curves, and one real run through the recipe."""

import json
import subprocess
import sys

import pytest
import yaml

from factory import RECIPE_DIR, REPO_ROOT, load_script

SCRIPT = REPO_ROOT / "benchmarks" / "time_to_accuracy.py"


def load():
    return load_script(SCRIPT)


def curve(wers, secs):
    return {"epochs": [{"epoch": i + 1, "wall_sec": s, "steps": 10 * (i + 1), "ter_ctc_token": w}
                       for i, (w, s) in enumerate(zip(wers, secs))]}


def test_target_is_the_reference_arms_best_and_each_arm_its_first_epoch_there():
    tta = load()
    results = {"metric": "ter_ctc_token", "target_arm": "numel", "arms": {
        "numel": {0: curve([0.5, 0.1, 0.05, 0.07], [100, 200, 300, 400])},
        "fast": {0: curve([0.4, 0.05, 0.2, 0.01], [80, 160, 240, 320])},
        "slow": {0: curve([0.9, 0.3, 0.2, 0.06], [90, 180, 270, 360])},
    }}
    out = tta.add_targets(results, ["numel", "fast", "slow"], [0])
    assert out["arms"]["numel"][0]["target"] == 0.05
    assert out["arms"]["numel"][0]["reached"]["epoch"] == 3  # its own best, first reached at epoch 3
    fast = out["arms"]["fast"][0]["reached"]
    assert (fast["epoch"], fast["steps"]) == (2, 20) and fast["wall_ratio_to_target_arm"] == pytest.approx(160 / 300)
    assert out["arms"]["slow"][0]["reached"] is None  # 0.06 never reaches 0.05
    table = tta.markdown(out)
    assert "| slow | 0 | 0.050 | not reached |" in table and "| fast | 0 | 0.050 | 2 | 160 | 20 | 0.53 |" in table


def test_last_two_mean_target_is_not_set_by_one_lucky_epoch():
    tta = load()
    # the reference's epoch 4 is a lucky dip: "best" targets it, "last_two_mean" the mean of 0.038 and 0.048
    ref = [1.0, 0.192, 0.086, 0.038, 0.048]
    assert tta.target_value(ref, "min", "best") == 0.038
    assert tta.target_value(ref, "min", "last_two_mean") == pytest.approx(0.043)
    assert tta.target_value([0.2, float("nan"), 0.4, 0.6], "max", "last_two_mean") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="unknown target rule"):
        tta.target_value(ref, "min", "median")
    results = {"metric": "ter_ctc_token", "target_arm": "numel", "target_rule": "last_two_mean", "arms": {
        "numel": {0: curve(ref, [100, 200, 300, 400, 500])},
        "dyn80": {0: curve([0.999, 0.066, 0.045, 0.047, 0.044], [80, 160, 240, 320, 400])},
    }}
    out = tta.add_targets(results, ["numel", "dyn80"], [0])
    numel, dyn = out["arms"]["numel"][0], out["arms"]["dyn80"][0]
    assert numel["target"] == pytest.approx(0.043) and numel["reached"]["epoch"] == 4  # the reference reaches it
    assert dyn["reached"] is None  # 0.044 is not 0.043: the rule is a threshold, not a tolerance
    assert dyn["best_target"] == 0.038 and dyn["reached_best"] is None
    dyn["epochs"][3]["ter_ctc_token"] = 0.043
    dyn = tta.add_targets(results, ["numel", "dyn80"], [0])["arms"]["dyn80"][0]
    assert dyn["reached"]["epoch"] == 4 and dyn["reached"]["wall_ratio_to_target_arm"] == pytest.approx(320 / 400)
    table = tta.markdown(out)
    assert "mean of the last two epochs" in table and "| 0.038: 4, 1.00 |" in table


def test_test_set_table_pairs_each_seed_with_the_target_arm(tmp_path):
    tta = load()

    def arm(wers):
        return {s: {**curve([0.1], [10]), "test_sets": {name: {"wer": w} for name, w in sets.items()}}
                for s, sets in wers.items()}

    results = {"metric": "ter_ctc_token", "target_arm": "A", "arms": {
        "A": arm({0: {"test": 1.0, "test_tempo0.8": 4.0}, 1: {"test": 2.0, "test_tempo0.8": 6.0}}),
        "E": arm({0: {"test": 1.5, "test_tempo0.8": 3.0}, 1: {"test": 2.5}}),
    }}
    lines = tta.test_set_table(results)
    assert "| arm | test | test_tempo0.8 |" in lines
    assert "| A | 1.50 (2) | 5.00 (2) |" in lines
    # test: differences +0.5 and +0.5 (no spread); tempo 0.8: one pair only (-1.0), no interval
    assert "| E | 2.00 (2), +0.50 [+0.50, +0.50] | 3.00 (1), -1.00 |" in lines
    assert tta.test_set_table({"target_arm": "A", "arms": {"A": {0: curve([0.1], [10])}}}) == []
    # the sets are read from the recipe's score directories
    args = type("Args", (), {"expdir": tmp_path, "inference_config": tmp_path / "decode_asr_ctc_greedy.yaml"})()
    for name, wer in (("test", 1.25), ("test_tempo1.25", 7.5)):
        d = tta.score_dir(args, "tta_A_s0", name)
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps({"wer": wer, "wer_sub": 1, "wer_del": 0, "wer_ins": 0,
                                                    "wer_ref_words": 80}))
    sets = tta.parse_test_sets(args, "tta_A_s0")
    assert list(sets) == ["test", "test_tempo1.25"] and sets["test_tempo1.25"]["wer"] == 7.5
    assert tta.parse_test_sets(args, "tta_F_s0") == {}


def test_seed_means_pair_each_seed_with_the_target_arm(tmp_path):
    tta = load()

    def arm(wers, accs, secs, losses):
        c = curve(wers, secs)
        for row, acc, loss in zip(c["epochs"], accs, losses):
            row["acc_token"], row["att_loss_target"] = acc, loss
        return c

    results = {"metric": "ter_ctc_token", "target_arm": "numel", "arms": {
        "numel": {0: arm([0.5, 0.1], [0.2, 0.3], [100, 200], [1.8, 1.5]),
                  1: arm([0.4, 0.2], [0.1, 0.4], [100, 200], [1.9, 1.6])},
        "dynres": {0: arm([0.3, 0.2], [0.3, 0.3], [110, 220], [1.9, 1.4]),
                   1: arm([0.4, 0.1], [0.2, 0.3], [90, 180], [1.85, 1.5])},
    }}
    means = tta.seed_means(results)
    ep1, ep2 = means["dynres"]
    assert (ep1["epoch"], ep1["seeds"]) == (1, 2)
    assert ep1["ter_ctc_token"] == pytest.approx(0.35) and ep2["acc_token"] == pytest.approx(0.3)
    assert ep1["seeds_ctc_not_behind"] == 2 and ep2["seeds_ctc_not_behind"] == 1  # seed 0 behind at epoch 2
    assert ep1["seeds_acc_not_behind"] == 2 and ep2["seeds_acc_not_behind"] == 1
    assert ep1["att_loss_target"] == pytest.approx(1.875) and ep2["att_loss_target"] == pytest.approx(1.45)
    assert ep1["seeds_att_loss_not_behind"] == 1 and ep2["seeds_att_loss_not_behind"] == 2  # lower loss is ahead
    assert ep2["wall_ratio_to_target_arm"] == pytest.approx((1.1 + 0.9) / 2)
    assert all(r["seeds_ctc_not_behind"] == r["seeds"] for r in means["numel"])  # the target arm against itself
    # paired differences: CTC WER epoch 1 is (-0.2, 0.0): mean -0.1, sd 0.1414, t_0.975(1) = 12.706
    d = ep1["diff_ter_ctc_token"]
    assert d["seeds"] == 2 and d["mean"] == pytest.approx(-0.1)
    assert d["ci95"] == pytest.approx(12.7062 * 0.141421 / 2 ** 0.5, rel=1e-4)
    assert d["low"] == pytest.approx(d["mean"] - d["ci95"]) and d["high"] == pytest.approx(d["mean"] + d["ci95"])
    assert means["numel"][0]["diff_acc_token"]["mean"] == 0.0
    table = tta.markdown(tta.add_targets(results, ["numel", "dynres"], [0, 1]))
    assert "| dynres | 2 | 2 | 200 | 1.00 | 0.300 | 1/2 | 0.150 | 1/2 | 1.450 | 2/2 |" in table
    assert "| dynres | 1 | 2 | -0.100 [-1.371, +1.171] |" in table
    tta.plot(results, tmp_path / "tta.png")
    assert (tmp_path / "tta.png").stat().st_size > 0


def test_paired_difference_interval_matches_students_t():
    tta = load()
    d = tta.paired_difference([1.0, 2.0, 3.0, float("nan")], [0.0, 0.0, 0.0, 1.0])  # NaN pair left out
    assert d["seeds"] == 3 and d["mean"] == pytest.approx(2.0)
    assert d["ci95"] == pytest.approx(4.302653 / 3 ** 0.5, rel=1e-6)  # t_0.975(2) x sd 1 / sqrt(3)
    one = tta.paired_difference([0.5], [0.25])
    assert one["mean"] == 0.25 and one["seeds"] == 1 and one["ci95"] != one["ci95"]  # no spread from one seed


def test_accuracy_metric_targets_the_maximum():
    tta = load()
    assert tta.first_reaching([0.1, 0.3, 0.29, 0.5], 0.3, "max") == 1
    assert tta.first_reaching([float("nan"), 0.2], 0.2, "min") == 1


@pytest.mark.slow
def test_two_arms_through_the_recipe_end_to_end(tmp_path):
    """Stages 1-10 on a small subset, then the benchmark trains a dynres and a numel arm (1 epoch each),
    decodes them and writes the table, JSON and PNG."""
    common = ["--num_train", "24", "--num_dev", "6", "--num_test", "4", "--datadir", str(tmp_path / "data"),
              "--dumpdir", str(tmp_path / "dump"), "--expdir", str(tmp_path / "exp")]
    prep = subprocess.run(["bash", str(RECIPE_DIR / "run.sh"), "--stage", "1", "--stop_stage", "10",
                           "--asr_config", "conf/train_asr_conformer_dynres_ci.yaml"] + common,
                          capture_output=True, text=True, timeout=900)
    assert prep.returncode == 0, (prep.stdout + prep.stderr)[-3000:]
    dynres = RECIPE_DIR / "conf" / "train_asr_conformer_dynres_ci.yaml"
    conf = yaml.safe_load(dynres.read_text())
    conf.update(batch_type="numel", batch_bins=400000, frontend="default", specaug="specaug", model="espnet")
    conf["frontend_conf"] = {k: conf["frontend_conf"][k] for k in ("n_fft", "win_length", "hop_length", "n_mels")}
    numel = tmp_path / "numel.yaml"
    numel.write_text(yaml.safe_dump(conf))
    out = subprocess.run([sys.executable, str(SCRIPT), "--recipe_dir", str(RECIPE_DIR), "--datadir", str(tmp_path / "data"),
                          "--dumpdir", str(tmp_path / "dump"), "--expdir", str(tmp_path / "exp"),
                          "--out_dir", str(tmp_path / "tta"), "--arm", f"numel={numel}", "--arm", f"dynres={dynres}",
                          "--seeds", "0", "--max_epoch", "1", "--num_train", "24", "--parallel", "2",
                          "--inference_config", str(RECIPE_DIR / "conf" / "decode_asr_ctc_greedy.yaml")],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    results = json.loads((tmp_path / "tta" / "time_to_accuracy.json").read_text())
    for arm in ("numel", "dynres"):
        entry = results["arms"][arm]["0"]
        row = entry["epochs"][0]
        assert row["epoch"] == 1 and row["steps"] > 0 and row["wall_sec"] > 0 and row["encoder_input_frames"] > 0
        assert 0.0 <= row["acc_token"] <= 1.0 and row["ter_ctc_token"] >= 0.0
        assert entry["test"]["N"] > 0 and entry["test"]["wer"] >= 0.0  # decoded and scored
        assert entry["test_sets"]["test"] == entry["test"]  # the one scored test set, read from its score dir
        assert (tmp_path / "exp" / f"asr_tta_{arm}_s0" / "epochs" / "1epoch.pth").exists()
        assert 0.2 < entry["train_peak_rss_gib"] < 20 and 0.2 < entry["decode_peak_rss_gib"] < 20  # torch + model
    assert results["arms"]["numel"]["0"]["reached"]["epoch"] == 1  # the reference reaches its own best
    assert (tmp_path / "tta" / "time_to_accuracy.png").stat().st_size > 0
    assert "| dynres | 0 |" in (tmp_path / "tta" / "time_to_accuracy.md").read_text()

    # benchmarks/step_profile.py on the two configs the trainings wrote.
    profile = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "step_profile.py"),
                              "--arm", f"numel={tmp_path / 'exp' / 'asr_tta_numel_s0' / 'config.yaml'}",
                              "--arm", f"dynres={tmp_path / 'exp' / 'asr_tta_dynres_s0' / 'config.yaml'}",
                              "--steps", "2", "--warmup", "1", "--json", str(tmp_path / "profile.json")],
                             capture_output=True, text=True, timeout=600)
    assert profile.returncode == 0, profile.stderr[-3000:]
    prof = json.loads((tmp_path / "profile.json").read_text())
    for arm in ("numel", "dynres"):
        phases = prof[arm]
        assert phases["encoder"] > 0 and phases["backward"] > 0 and phases["frontend"] > 0
        assert phases["total"] == pytest.approx(sum(v for k, v in phases.items() if k not in (
            "total", "audio_sec_per_step", "steps", "restat_sec_per_epoch", "restat_sample_utts", "epoch_audio_sec",
            "frontend_calls_per_step")))
        assert phases["audio_sec_per_step"] > 0
        assert phases["epoch_audio_sec"] > phases["audio_sec_per_step"]
    # the re-estimate: timed for the plugin's model over the sample the steps offered, spread over an epoch;
    # ESPnet's model has none
    assert prof["numel"]["restat"] == 0 and prof["numel"]["restat_sample_utts"] == 0
    dyn = prof["dynres"]
    assert dyn["restat_sample_utts"] > 0 and dyn["restat_sec_per_epoch"] > 0
    assert dyn["restat"] == pytest.approx(dyn["restat_sec_per_epoch"] * dyn["audio_sec_per_step"] / dyn["epoch_audio_sec"])
    # the re-estimate encodes its sample through the frontend and the encoder: none of that is a step's phase
    assert prof["numel"]["frontend_calls_per_step"] == 1 and dyn["frontend_calls_per_step"] == 1


@pytest.mark.slow
def test_gpu_script_time_to_accuracy_mode_dry_run(tmp_path):
    """benchmarks/run_gpu_benchmark.sh --mode time_to_accuracy: the GPU command's code paths on CPU, tiny sizes."""
    script = REPO_ROOT / "benchmarks" / "run_gpu_benchmark.sh"
    env = dict(__import__("os").environ, OUT=str(tmp_path / "out"), TMPDIR=str(tmp_path))
    out = subprocess.run(["bash", str(script), "--mode", "time_to_accuracy", "--device", "cpu", "--dry_run"],
                         capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    results = json.loads((tmp_path / "out" / "time_to_accuracy.json").read_text())
    assert results["arms"]["dynres"]["0"]["test"]["N"] > 0
    bad = subprocess.run(["bash", str(script), "--mode", "bogus"], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "unknown --mode bogus" in bad.stderr


def test_valid_figures_are_reused_only_for_the_same_checkpoint_data_and_script(tmp_path):
    import os
    import types

    tta = load()
    script = tmp_path / "valid_metrics.py"
    script.write_text("# version 1\n")
    calls = []
    vm = types.SimpleNamespace(__file__=str(script),
                               evaluate=lambda ckpt, valid, config, *rest: calls.append(ckpt) or {"acc_token": len(calls)})
    ckpt = tmp_path / "epochs" / "1epoch.pth"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"weights")
    valid = tmp_path / "dev"
    valid.mkdir()
    assert tta.evaluate_cached(vm, ckpt, valid, None) == {"acc_token": 1}
    assert tta.evaluate_cached(vm, ckpt, valid, None) == {"acc_token": 1} and len(calls) == 1  # reused
    assert (ckpt.parent / "1epoch.valid_metrics.json").exists()
    ckpt.write_bytes(b"weights, retrained")
    assert tta.evaluate_cached(vm, ckpt, valid, None) == {"acc_token": 2}  # a new checkpoint: evaluated again
    script.write_text("# version 2\n")
    assert tta.evaluate_cached(vm, ckpt, valid, None) == {"acc_token": 3}  # a changed metric script: again
    other = tmp_path / "test"
    other.mkdir()
    assert tta.evaluate_cached(vm, ckpt, other, None) == {"acc_token": 4}  # other data: again
    os.utime(ckpt, ns=(0, 0))
    assert tta.evaluate_cached(vm, ckpt, other, None) == {"acc_token": 5}  # same bytes, other mtime: again


def test_epoch_checkpoints_are_copied_only_once_written(tmp_path):
    """A checkpoint seen mid-write (ESPnet's torch.save in place) must not stay a truncated copy: polls
    stepped one by one, so the outcome does not depend on the machine's speed."""
    tta = load()
    exp = tmp_path / "exp"
    exp.mkdir()
    ckpt, copy = exp / "1epoch.pth", exp / "epochs" / "1epoch.pth"
    seen = {}
    ckpt.write_bytes(b"partial")  # the writer is still at work
    tta.copy_stable_checkpoints(exp, seen, final=False)
    assert not copy.exists()  # seen once: not known to be complete
    ckpt.write_bytes(b"partial" + b"x" * 1000)  # the write goes on between two polls
    tta.copy_stable_checkpoints(exp, seen, final=False)
    assert not copy.exists()  # changed since the previous poll
    tta.copy_stable_checkpoints(exp, seen, final=False)
    assert copy.read_bytes() == ckpt.read_bytes()  # unchanged over two polls: copied
    ckpt.write_bytes(b"rewritten")  # the same epoch saved again
    tta.copy_stable_checkpoints(exp, seen, final=False)
    assert copy.read_bytes() != ckpt.read_bytes()  # a changed source is not copied mid-write ...
    tta.copy_stable_checkpoints(exp, seen, final=False)
    assert copy.read_bytes() == b"rewritten"  # ... but once it is stable again
    (exp / "2epoch.pth").write_bytes(b"second")
    tta.copy_stable_checkpoints(exp, seen, final=True)
    assert (exp / "epochs" / "2epoch.pth").read_bytes() == b"second"  # copied on the final pass


def test_epoch_checkpoint_copier_makes_a_final_pass_when_stopped(tmp_path):
    """The copying thread's loop: once ``stop`` is set it copies what is there and returns."""
    import threading

    tta = load()
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "3epoch.pth").write_bytes(b"third")
    stop = threading.Event()
    stop.set()
    tta.copy_epoch_checkpoints(exp, stop, poll_sec=3600.0)  # returns at once, a poll of an hour unused
    assert (exp / "epochs" / "3epoch.pth").read_bytes() == b"third"


def test_peak_memory_is_that_of_the_largest_process_of_the_tree(tmp_path):
    """A shell whose grandchild holds 300 MiB for a moment: the peak is at least that, and a tree
    whose processes hold little stays far below it."""
    import os

    tta = load_script(SCRIPT)
    hold = f"{sys.executable} -c 'x = bytearray(300 * 2**20); x[::4096] = b\"a\" * len(x[::4096])'"
    code, peak_kib = tta.run_measured(["bash", "-c", f"bash -c \"{hold}\"; exit 3"], tmp_path, dict(os.environ),
                                      tmp_path / "log")
    assert code == 3 and peak_kib > 300 * 1024
    code, small_kib = tta.run_measured(["bash", "-c", "true"], tmp_path, dict(os.environ), tmp_path / "log")
    assert code == 0 and small_kib < 100 * 1024


def test_summary_table_gives_each_seed_and_the_mean_with_paired_intervals(tmp_path):
    tta = load()

    def arm(wers, secs, tests, frames):
        out = {}
        for seed, (w, s, (wer, cer)) in enumerate(zip(wers, secs, tests)):
            c = curve(w, s)
            for i, row in enumerate(c["epochs"]):
                row["encoder_input_frames"] = frames * (i + 1)
            c["test"] = {"wer": wer, "S": 1, "D": 0, "I": 0, "cer": cer, "cer_S": 2, "cer_D": 1, "cer_I": 0}
            out[seed] = c
        return out

    results = {"metric": "ter_ctc_token", "target_arm": "A", "target_rule": "last_two_mean", "arms": {
        "A": arm([[0.5, 0.1, 0.05], [0.5, 0.2, 0.1]], [[100, 200, 300], [100, 200, 300]], [(2.0, 1.0), (3.0, 2.0)], 1000),
        "E": arm([[0.3, 0.07, 0.05], [0.6, 0.5, 0.4]], [[80, 160, 240], [80, 160, 240]], [(1.0, 0.5), (2.0, 1.5)], 800),
    }}
    tta.add_targets(results, ["A", "E"], [0, 1])
    lines = tta.summary_table(results)
    # A's target in seed 0 is 0.075 (reached at epoch 3, 300 s); E reaches it at epoch 2, 160 s: 0.53x
    assert "| E | 0 | 80 | 800 | 2, 20 | 160 (0.53×) | 3 (0.80×) | 1.00 (1/0/0) | 0.50 (2/1/0) |" in lines
    # seed 1: A's target 0.15, E never below 0.4
    assert "| E | 1 | 80 | 800 | not reached | — | not reached | 2.00 (1/0/0) | 1.50 (2/1/0) |" in lines
    # mean: one seed reached (no interval); WER and CER differences -1.0 in both seeds (no spread)
    assert ("| **E** | mean | 80 | 800 | 1/2 seeds, 20 steps | 0.53× | 0.80× | 1.50, Δ -1.00 [-1.00, -1.00] "
            "| 1.00, Δ -0.50 [-0.50, -0.50] |") in lines
    assert "| **A** | mean | 100 | 1,000 | 2/2 seeds, 30 steps | 1.00× | — | 2.50 | 1.50 |" in lines
    # the recipe's score file gives CER with its S/D/I where present
    d = tmp_path / "score"
    d.mkdir()
    (d / "result.json").write_text(json.dumps({"wer": 1.5, "wer_sub": 1, "wer_del": 0, "wer_ins": 0, "wer_ref_words": 80,
                                               "cer": 0.9, "cer_sub": 2, "cer_del": 1, "cer_ins": 0,
                                               "cer_ref_chars": 300}))
    assert tta.parse_wer(d) == {"wer": 1.5, "S": 1, "D": 0, "I": 0, "N": 80, "cer": 0.9, "cer_S": 2, "cer_D": 1,
                                "cer_I": 0, "cer_N": 300}


def test_merge_reports_pairs_run_separately_against_one_target_arm(tmp_path):
    """Two pairs trained in separate runs (A with C, E with F): one report whose target is A's in each seed."""
    tta = load()

    def run_file(name, arms, target_arm):
        results = {"metric": "ter_ctc_token", "target_arm": target_arm, "target_rule": "last_two_mean",
                   "arms": {arm: {seed: curve(w, [100, 200, 300]) for seed, w in seeds.items()}
                            for arm, seeds in arms.items()}}
        tta.add_targets(results, list(arms), sorted(next(iter(arms.values()))))
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(results))  # seeds become strings, as in the benchmark's own file
        return path

    ac = run_file("ac", {"A": {1: [0.5, 0.2, 0.1]}, "C": {1: [0.5, 0.1, 0.05]}}, "A")
    ef = run_file("ef", {"E": {1: [0.4, 0.14, 0.02]}, "F": {1: [0.6, 0.3, 0.2]}}, "E")
    merged = tta.merge_results([ac, ef], None, "last_two_mean")
    assert merged["target_arm"] == "A" and list(merged["arms"]) == ["A", "C", "E", "F"]
    e, f = merged["arms"]["E"][1], merged["arms"]["F"][1]
    assert e["target"] == pytest.approx(0.15) and e["reached"]["epoch"] == 2  # A's target, not E's own (0.08)
    assert e["reached"]["wall_ratio_to_target_arm"] == pytest.approx(200 / 300) and f["reached"] is None
    assert tta.main(["--merge", str(ac), str(ef), "--out_dir", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "time_to_accuracy.md").read_text()
    assert "| E | 1 | 100 | — | 2, 20 | 200 (0.67×) | 3 (1.00×) | — | — |" in table  # s/epoch 300/3, no frames
    assert (tmp_path / "out" / "time_to_accuracy.png").stat().st_size > 0
    partial = tta.merge_results([ac, ef, run_file("a2", {"A": {2: [0.5, 0.2, 0.1]}}, "A")], None, "last_two_mean")
    assert list(partial["arms"]["C"]) == [1] and partial["arms"]["A"][2]["reached"]["epoch"] == 3  # C's seed 2 to come
    with pytest.raises(ValueError, match="arm A seed 1 is in an earlier file"):
        tta.merge_results([ac, ac], None, "last_two_mean")
    with pytest.raises(ValueError, match="target arm 'C' has no run for seed"):
        tta.merge_results([run_file("c2", {"A": {2: [0.5, 0.2, 0.1]}}, "A"), ac], "C", "last_two_mean")


def test_cpu_rotation_moves_each_training_tree_to_the_next_cpu():
    """Two trainings (each a shell with a child, as run.sh starts ESPnet) swap CPUs at every rotation."""
    import os
    import subprocess as sp

    tta = load()
    cpus = sorted(os.sched_getaffinity(0))
    rotation = tta.CpuRotation(60.0, cpus=cpus)
    # the shell prints once it has started its child, so the tree is complete when the line is read
    roots = [sp.Popen(["bash", "-c", "sleep 300 & echo started; wait"], stdout=sp.PIPE, text=True,
                      start_new_session=True) for _ in range(2)]
    try:
        for root in roots:
            rotation.register(root.pid)
            assert root.stdout.readline() == "started\n"
        trees = [tta.process_tree(r.pid) for r in roots]
        assert all(len(t) == 2 for t in trees)  # the shell and its sleep
        for rotation_step in range(3):
            placed = rotation.rotate()
            expected = [cpus[(i + rotation_step) % len(cpus)] for i in range(2)]
            assert [placed[r.pid] for r in roots] == expected
            for tree, cpu in zip(trees, expected):
                assert all(os.sched_getaffinity(pid) == {cpu} for pid in tree)  # children too
        if len(cpus) > 1:  # the two trees are never on one CPU, and each has been on both
            assert placed[roots[0].pid] != placed[roots[1].pid]
        rotation.unregister(roots[0].pid)
        assert rotation.assignment() == {roots[1].pid: cpus[rotation.step % len(cpus)]}
    finally:
        for root in roots:
            os.killpg(root.pid, 9)  # the shell and its sleep
            root.wait()
            root.stdout.close()


def test_eval_rate_variant_is_the_trained_arm_validated_and_scored_at_its_rate(tmp_path):
    """The variant keeps the trained arm's epochs and takes its valid figures from each checkpoint evaluated
    with the variant's config after a BatchNorm re-estimate over the training directory."""
    import types

    tta = load()
    calls, devices = [], []

    def evaluate(ckpt, valid_dir, config, restat_train_dir=None, restat_batches=6, device="cpu"):
        calls.append((ckpt.name, config.parent.name, restat_train_dir.name, restat_batches))
        devices.append(device)
        return {"ter_ctc_token": 0.1 * int(ckpt.name[0])}

    vm_file = tmp_path / "vm.py"
    vm_file.write_text("# stand-in\n")
    vm = types.SimpleNamespace(evaluate=evaluate, __file__=str(vm_file))
    exp = tmp_path / "exp"
    (exp / "asr_tta_E_s1" / "epochs").mkdir(parents=True)
    for e in (1, 2):
        (exp / "asr_tta_E_s1" / "epochs" / f"{e}epoch.pth").write_bytes(b"x" * e)
    (exp / "asr_tta_E80_s1").mkdir()
    (exp / "asr_tta_E80_s1" / "config.yaml").write_text(yaml.safe_dump({"model_conf": {"batchnorm_restat_batches": 3}}))
    args = type("Args", (), {"expdir": exp, "tag_prefix": "tta_", "valid_dir": tmp_path / "dev",
                             "dumpdir": tmp_path / "dump", "inference_config": tmp_path / "decode_asr_ctc_greedy.yaml"})()
    base = {"epochs": [{"epoch": 1, "wall_sec": 100, "train_sec": 90, "steps": 10, "encoder_input_frames": 5,
                        "ter_ctc_token": 0.9}, {"epoch": 2, "wall_sec": 200, "train_sec": 180, "steps": 20,
                                                "encoder_input_frames": 10, "ter_ctc_token": 0.8}],
            "batches_per_epoch": 10}
    entry = tta.eval_rate_variant_entry(args, vm, "E80", base, "tta_E_s1", 1)
    assert [r["ter_ctc_token"] for r in entry["epochs"]] == [0.1, 0.2]  # the variant's figures, not E's
    assert [(r["wall_sec"], r["steps"]) for r in entry["epochs"]] == [(100, 10), (200, 20)]  # E's training
    assert calls == [("1epoch.pth", "asr_tta_E80_s1", "train", 3), ("2epoch.pth", "asr_tta_E80_s1", "train", 3)]
    assert (exp / "asr_tta_E_s1" / "epochs" / "1epoch.valid_metrics.E80.json").exists()  # beside E's own cache
    tta.eval_rate_variant_entry(args, vm, "E80", base, "tta_E_s1", 1)
    assert len(calls) == 2  # cached
    assert devices == ["cpu", "cpu"]  # no --ngpu: evaluated on the CPU
    args.ngpu = 1
    for f in (exp / "asr_tta_E_s1" / "epochs").glob("*.json"):
        f.unlink()
    tta.eval_rate_variant_entry(args, vm, "E80", base, "tta_E_s1", 1)
    assert devices == ["cpu", "cpu", "cuda", "cuda"]  # the arms trained on a GPU: evaluated there
    arms = {"E": tmp_path / "e.yaml"}
    assert tta.parse_eval_rate_variants(["E80=E:80"], arms) == {"E80": ("E", 80.0)}
    for bad in ("E80=F:80", "E80=E", "E80=E:zero", "=E:80"):
        with pytest.raises(SystemExit, match="NAME=ARM:RATE_HZ"):
            tta.parse_eval_rate_variants([bad], arms)


def test_short_epochs_count_the_steps_they_take_from_each_pass():
    """--num_iters_per_epoch N: an epoch is N steps, running through the passes over the data one after
    the other; its frames are those steps' share of each pass."""
    tta = load()
    assert tta.sub_epoch_frames([{"batches": 10, "frames": 100.0}], 4, 5) == [40.0] * 5
    passes = [{"batches": 9, "frames": 90.0}, {"batches": 3, "frames": 60.0}]
    assert tta.sub_epoch_frames(passes, 4, 3) == [40.0, 40.0, 10.0 + 3 * 20.0]
    assert sum(tta.sub_epoch_frames([{"batches": 6, "frames": 60.0}], 2, 9)) == pytest.approx(3 * 60.0)


def test_recipe_args_reach_every_run_sh_call(tmp_path, monkeypatch):
    tta = load()
    seen = []
    monkeypatch.setattr(tta, "run_measured", lambda cmd, cwd, env, log, rotation: (seen.append(cmd), (0, 0))[1])
    args = tta.get_parser().parse_args(["--out_dir", str(tmp_path), "--datadir", "d", "--dumpdir", "u", "--expdir", "e",
                           "--arm", "a=x.yaml", "--recipe_args", "--speed_perturb_factors '0.9 1.0 1.1'"])
    tta.run_recipe(args, "a_s0", "11-11", ["--asr_config", "x.yaml"], tmp_path / "log")
    cmd = seen[0]
    assert cmd[cmd.index("--speed_perturb_factors") + 1] == "0.9 1.0 1.1" and cmd[-2:] == ["--asr_config", "x.yaml"]


def test_an_arm_at_another_arms_training_time_is_its_nearest_epoch_checkpoint(tmp_path, monkeypatch):
    """--at_wallclock_of REPORT:C: speed perturbation's short epochs evaluated at the main job's training
    time: the checkpoint nearest C's last epoch in the same seed is copied, decoded and reported."""
    tta = load()
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"arms": {"C": {"0": {"epochs": [{"epoch": 5, "wall_sec": 1000.0}]}}}}))
    args = tta.get_parser().parse_args(["--out_dir", str(tmp_path / "out"), "--datadir", "d", "--dumpdir", "u",
                                        "--expdir", str(tmp_path / "exp"), "--arm", "SP=x.yaml",
                                        "--at_wallclock_of", f"{ref}:C"])
    args.out_dir.mkdir()
    args.inference_config = tmp_path / "decode_asr_ctc_greedy.yaml"
    exp = tmp_path / "exp" / "asr_tta_SP_s0"
    (exp / "epochs").mkdir(parents=True)
    for e in range(1, 7):
        (exp / "epochs" / f"{e}epoch.pth").write_text(f"checkpoint {e}")
    decoded = []

    def fake_recipe(args, tag, stages, extra, log, rotation=None):
        decoded.append(extra[extra.index("--inference_asr_model") + 1])
        score = tmp_path / "exp" / f"asr_{tag}" / "decode_decode_asr_ctc_greedy_at_wallclock" / "test" / "score"
        score.mkdir(parents=True)
        (score / "result.json").write_text(json.dumps({"wer": 1.5, "wer_sub": 1, "wer_del": 0, "wer_ins": 0,
                                                        "wer_ref_words": 70}))
        return 0

    monkeypatch.setattr(tta, "run_recipe", fake_recipe)
    rows = [{"epoch": e, "wall_sec": 330.0 * e, "steps": 169 * e} for e in range(1, 7)]  # 330, 660, 990, ...
    entry = tta.at_wallclock_entry(args, "SP", 0, {"epochs": rows}, tta.parse_at_wallclock(f"{ref}:C"))
    assert entry["checkpoint_epoch"] == 3 and entry["reference_wall_sec"] == 1000.0  # 990 s is nearest
    assert [r["epoch"] for r in entry["epochs"]] == [1, 2, 3]
    assert (exp / "at_wallclock.pth").read_text() == "checkpoint 3" and decoded == ["at_wallclock.pth"]
    assert entry["test"]["wer"] == 1.5 and entry["test_sets"]["test"]["wer"] == 1.5
    with pytest.raises(SystemExit, match="no arm 'A' with seed 0"):
        tta.at_wallclock_entry(args, "SP", 0, {"epochs": rows}, (ref, "A"))
    with pytest.raises(SystemExit, match="REPORT.json:ARM"):
        tta.parse_at_wallclock("no_such.json:C")


def test_an_arm_trains_as_run_sh_does_unless_told_otherwise(tmp_path):
    """Short epochs, another checkpoint choice or another max_epoch with decoding are refused without
    --nonstandard_protocol, and the report and a merge of reports carry each arm's protocol."""
    tta = load()
    cfg = tmp_path / "sp.yaml"
    cfg.write_text(yaml.safe_dump({"max_epoch": 5, "keep_nbest_models": 3, "best_model_criterion": [["valid", "acc", "max"]]}))
    standard = tta.training_protocol(cfg, None, "--grad_clip 1 --keep_nbest_models 3")  # same value: no deviation
    assert (standard["max_epoch"], standard["keep_nbest_models"], standard["deviations"], standard["notes"]) == (5, 3, [], [])
    short = tta.training_protocol(cfg, 15, "--num_iters_per_epoch 169")
    assert short["deviations"] == ["max_epoch 15 (config: 5)", "num_iters_per_epoch 169 (config: None)"]
    assert short["max_epoch"] == 15 and short["num_iters_per_epoch"] == 169
    early = tta.training_protocol(cfg, 2, "", decode=False)  # run.sh's first two epochs, not decoded
    assert early["deviations"] == [] and early["notes"] == ["max_epoch 2 (config: 5): run.sh's first epochs"]
    assert tta.training_protocol(cfg, 2, "")["deviations"] == ["max_epoch 2 (config: 5)"]
    assert tta.training_protocol(cfg, None, "--keep_nbest_models 1")["deviations"] == ["keep_nbest_models 1 (config: 3)"]
    bare = tmp_path / "bare.yaml"
    bare.write_text("batch_type: numel\n")
    with pytest.raises(SystemExit, match="sets no max_epoch"):
        tta.training_protocol(bare, None, "")
    argv = ["--out_dir", str(tmp_path / "out"), "--datadir", "d", "--dumpdir", "u", "--expdir", str(tmp_path / "exp"),
            "--arm", f"SP={cfg}", "--max_epoch", "15", "--asr_args", "--num_iters_per_epoch 169"]
    with pytest.raises(SystemExit, match=r"SP: max_epoch 15 \(config: 5\), num_iters_per_epoch 169.*--nonstandard_protocol"):
        tta.main(argv)
    with pytest.raises(SystemExit, match="run the recipe's stages 1-10 first"):  # let through, on to the data
        tta.main(argv + ["--nonstandard_protocol"])
    def run_file(seed, protocol):
        path = tmp_path / f"s{seed}.json"
        entry = {**curve([0.5, 0.2], [100, 200]), **({"protocol": protocol} if protocol else {})}
        path.write_text(json.dumps({"metric": "ter_ctc_token", "arms": {"SP": {str(seed): entry}}}))
        return path

    # a merge keeps each seed's protocol, and the report says which seeds trained under which
    merged = tta.merge_results([run_file(0, standard), run_file(1, short), run_file(2, standard), run_file(3, None)],
                               None, "last_two_mean")
    assert merged["arms"]["SP"][1]["protocol"] == short
    lines = tta.protocol_lines(merged)
    assert lines[0].startswith("- `SP`, seeds 0, 2: protocol: as run.sh trains its config (max_epoch 5, "
                               "keep_nbest_models 3, num_iters_per_epoch —)")
    assert lines[1].startswith("- `SP`, seed 1: **not run.sh's protocol**: max_epoch 15 (config: 5); "
                               "num_iters_per_epoch 169")
    assert lines[2] == "- `SP`, seed 3: protocol not recorded (a report from before the tool recorded it)"
    assert tta.markdown(merged).startswith("\n".join(lines))


@pytest.mark.parametrize("kept, averaged", [
    ([2, 4, 5], [2, 4, 5]),  # the last epoch among the 3 best
    ([1, 3, 4, 5], [1, 3, 4]),  # the last kept beside the 3 best, not averaged
    ([5], None),  # pruned by hand: cannot be told
])
def test_averaged_epochs_are_the_checkpoints_espnet_kept(tmp_path, kept, averaged):
    tta = load()
    (tmp_path / "train.log").write_text("".join(f"{e}epoch results: [train] loss=1.0, [valid] acc=0.9\n"
                                                for e in range(1, 6)))
    for e in kept:
        (tmp_path / f"{e}epoch.pth").write_text("")
    (tmp_path / "valid.acc.ave_3best.pth").write_text("")  # not an epoch's checkpoint
    assert tta.averaged_epochs(tmp_path, 3) == averaged
