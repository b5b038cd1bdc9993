"""benchmarks/rate_variety_goals.py: the study's figures and goals from time_to_accuracy.json files."""

import json
import math

import pytest

from factory import REPO_ROOT, load_script

SCRIPT = REPO_ROOT / "benchmarks" / "rate_variety_goals.py"
SETS = ["test", "test_tempo0.8", "test_tempo0.9", "test_tempo1.1", "test_tempo1.25", "test_speed0.9", "test_speed1.1"]


def entry(wers, epochs=3, sec_per_epoch=100.0, checkpoint_epoch=None):
    """One run: WER % per set in SETS' order, cumulative epoch rows as time_to_accuracy records them."""
    e = {"epochs": [{"epoch": i, "wall_sec": sec_per_epoch * i, "train_sec": 0.9 * sec_per_epoch * i,
                     "steps": 10 * i, "encoder_input_frames": 1000.0 * i, "ter_ctc_token": 0.5 / i}
                    for i in range(1, epochs + 1)],
         "test_sets": {name: {"wer": w} for name, w in zip(SETS, wers)}}
    if checkpoint_epoch is not None:
        e["checkpoint_epoch"] = checkpoint_epoch
    return e


def write(tmp_path, name, arms):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"metric": "ter_ctc_token", "target_arm": next(iter(arms)),
                                "target_rule": "last_two_mean", "arms": arms}))
    return path


def study(tmp_path, csp_sec=(107.0, 104.0)):
    """Two seeds; the tempo sets are WER 2 for C, 4 for SP, 5 for SP@C, the perturbed ones lower for CSP."""
    files = []
    for seed, jitter in ((0, 0.0), (1, 0.2)):
        files.append(write(tmp_path, f"seed{seed}_AC", {
            "A": {str(seed): entry([2.0 + jitter, 3, 3, 3, 3, 50, 10])},
            "C": {str(seed): entry([1.0, 2 + jitter, 2, 2, 2, 50, 8])}}))
        files.append(write(tmp_path, f"seed{seed}_SP", {
            "SP": {str(seed): entry([2.0, 4, 4, 4, 4, 2, 2], epochs=9)},
            "CSP": {str(seed): entry([1.5, 3, 3, 3, 3 + jitter, 1, 1], epochs=9, sec_per_epoch=csp_sec[seed])},
            "SP@C": {str(seed): entry([3.0, 5, 5, 5, 5, 3, 3], epochs=9, checkpoint_epoch=3)}}))
    return files


def test_figures_are_read_at_the_evaluated_checkpoint_and_means_need_every_set():
    goals = load_script(SCRIPT)
    f = goals.figures(entry([1, 2, 3, 4, 5, 6, 7], epochs=9, checkpoint_epoch=3))
    assert (f["wall_sec"], f["train_sec"], f["encoder_frames"]) == (300.0, 270.0, 3000.0)  # epoch 3's totals
    assert f["tempo_mean"] == pytest.approx(3.5) and f["perturbed_mean"] == pytest.approx(4.5)
    assert goals.figures(entry([1, 2, 3, 4, 5, 6, 7]))["wall_sec"] == 300.0  # the last epoch without a checkpoint
    partial = entry([1, 2, 3, 4, 5, 6, 7])
    del partial["test_sets"]["test_tempo1.25"]
    assert goals.figures(partial)["tempo_mean"] != goals.figures(partial)["tempo_mean"]  # NaN, not a 3-set mean


def test_goals_per_seed_and_in_the_mean_with_the_interval(tmp_path):
    goals = load_script(SCRIPT)
    table = goals.table_of(goals.merge_results(study(tmp_path), "A", "last_two_mean"))
    rows = {r["goal"]: r for r in goals.goals(table, ["C", "J"])}
    better = rows["tempi: C better than SP@C (equal wall-clock)"]
    assert better["per_seed"][0] == (2.0, 5.0, True) and better["met_in_mean"] and better["shown"]
    assert better["mean"]["mean"] == pytest.approx(-2.975)  # (2 − 5 + 2.05 − 5) / 2
    within = rows["tempi: C within 10% of SP (5 passes)"]
    assert within["per_seed"][1][1] == pytest.approx(4.4) and within["met_in_mean"]
    assert not any(r["arm"] == "J" for r in rows.values())  # no J run: no J goal, no error
    on_top = rows["6 perturbed: CSP better than SP"]
    assert on_top["per_seed"][1][0] == pytest.approx((3 * 3 + 3.2 + 1 + 1) / 6) and on_top["shown"]
    time = rows["wall-clock CSP / SP at most 1.05×"]
    assert [time["per_seed"][s][2] for s in (0, 1)] == [False, True]  # 1.07 and 1.04
    assert time["mean"]["mean"] == pytest.approx(0.005) and not time["met_in_mean"] and not time["shown"]
    table["SP"][1]["test_speed1.1"] = table["SP"][1]["perturbed_mean"] = float("nan")  # not scored in seed 1
    unscored = {r["goal"]: r for r in goals.goals(table, ["C"])}["6 perturbed: CSP better than SP"]
    assert unscored["per_seed"][1][2] is None and unscored["mean"]["seeds"] == 1
    clean = rows["clean: CSP at most A + 0.3"]
    assert clean["per_seed"][0] == (1.5, pytest.approx(2.3), True)
    assert rows["clean: CSP better than SP"]["per_seed"][1] == (1.5, 2.0, True)


def test_speed_perturbation_pairs_alone_give_the_on_top_of_sp_goals(tmp_path):
    """SP and CSP trained as run.sh does, no A, C or SP@C: the goals those two arms decide, over their seeds."""
    goals = load_script(SCRIPT)
    files = [write(tmp_path, f"seed{s}", {"SP": {str(s): entry([1.0 + s, 3, 3, 3, 3, 2, 2], epochs=5)},
                                         "CSP": {str(s): entry([0.5 + 2 * s, 2, 2, 2, 2, 1, 1], epochs=5)}})
             for s in (0, 1, 2)]
    table = goals.table_of(goals.merge_results(files, None, "last_two_mean"))
    rows = {r["goal"]: r for r in goals.goals(table, [])}
    assert set(rows) == {"6 perturbed: CSP better than SP", "clean: CSP better than SP", "wall-clock CSP / SP at most 1.05×",
                         "(for reference) training time without validation CSP / SP at most 1.05×"}
    clean = rows["clean: CSP better than SP"]
    assert [clean["per_seed"][s][2] for s in (0, 1, 2)] == [True, False, False]  # 0.5/1, 2.5/2, 4.5/3
    assert clean["mean"]["mean"] == pytest.approx(0.5) and not clean["met_in_mean"] and not clean["shown"]
    assert rows["6 perturbed: CSP better than SP"]["shown"]  # one point lower in every seed
    out = tmp_path / "sp.md"
    assert goals.main([*map(str, files), "--variety_arms", "--beside", "CSP=SP", "--out", str(out)]) == 0
    assert "| CSP − SP | +0.50 [" in out.read_text()


def test_report_names_a_missing_arm_and_the_cli_writes_markdown(tmp_path):
    goals = load_script(SCRIPT)
    files = study(tmp_path)
    with pytest.raises(SystemExit, match=r"no run of arm\(s\) \['SP', 'CSP'\]"):
        goals.main([str(files[0]), str(files[2])])  # the A+C runs only
    out = tmp_path / "goals.md"
    assert goals.main([*map(str, files), "--out", str(out), "--png", str(tmp_path / "wer.png")]) == 0
    assert (tmp_path / "wer.png").stat().st_size > 0
    text = out.read_text()
    assert "| C − SP | -1.00 [-1.00, -1.00] | -1.90 [" in text  # clean, tempo 0.8: paired over two seeds
    assert "| tempi: C better than SP@C (equal wall-clock) | 2.00 / 5.00 yes | 2.05 / 5.00 yes | -2.9" in text
    assert "| wall-clock CSP / SP at most 1.05× | 1.070 / 1.050 no | 1.040 / 1.050 yes | +0.005 [" in text
    assert text.count("| no | no |") == 2  # only the time goal (and its reference row without validation) is missed


def test_summary_rows_give_the_mean_the_range_and_the_ratios_to_the_arm_beside(tmp_path):
    goals = load_script(SCRIPT)
    table = goals.table_of(goals.merge_results(study(tmp_path), "A", "last_two_mean"))
    lines = goals.summary_lines(table, {"C": "A", "CSP": "SP", "SP@C": "C"})
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert rows["A"] == "| A | 2 | 30 | 1 (reference) | 1 (reference) | 2.10 (2.00–2.20) | 3.00 (3.00–3.00) " \
                        "| 50.00 (50.00–50.00) | 10.00 (10.00–10.00) | 12.00 (12.00–12.00) |"
    # wall-clock ratios 1.07 and 1.04; equal dev curves reach SP's target at the same epoch, so the same ratios
    assert " | 1.055 (1.040–1.070) × SP | 1.06 (1.04–1.07) (2/2 reached) | " in rows["CSP"]
    assert " | 30 | 1.000 (1.000–1.000) × C | — | " in rows["SP@C"]  # read at its checkpoint: no time to target
    assert rows["SP"].split(" | ")[2:5] == ["90", "1 (reference)", "1 (reference)"]
    del table["A"][1]
    assert " | 1.000 × A | 1.00 (1/1 reached) | " in goals.summary_lines(table, {"C": "A"})[3]  # the shared seed only
    with pytest.raises(SystemExit, match="--beside 'C:A': write ARM=REF"):
        goals.main([*map(str, study(tmp_path)), "--beside", "C:A"])
    with pytest.raises(SystemExit, match="--beside 'C=Z': no run of arm 'Z'"):
        goals.main([*map(str, study(tmp_path)), "--beside", "C=Z", "Jw=J"])  # Jw: not in these files, skipped


def test_time_to_target_is_the_first_epoch_at_the_references_last_two_mean():
    goals = load_script(SCRIPT)
    reference = [(100.0, 0.5), (200.0, 0.3), (300.0, 0.2), (400.0, 0.22)]  # target 0.21, first reached at 300 s
    assert goals.time_to_target_ratio([(110.0, 0.4), (220.0, 0.21), (330.0, 0.1)], reference) == pytest.approx(220 / 300)
    assert math.isnan(goals.time_to_target_ratio([(110.0, 0.4), (220.0, 0.25)], reference))  # never reached
    assert math.isnan(goals.time_to_target_ratio([], reference))
