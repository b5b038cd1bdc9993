"""benchmarks/ctc_plateau_exit.py: the first training window below a CTC loss per token, on synthetic logs."""

import pytest

from factory import REPO_ROOT, load_script

SCRIPT = REPO_ROOT / "benchmarks" / "ctc_plateau_exit.py"


def line(epoch, a, b, ctc, per_token):
    extra = ", batch_tokens=90.0" if per_token else ""
    return (f"[vm] 2026-12-01 00:00:00,000 (trainer:811) INFO: {epoch}epoch:train:{a}-{b}batch: "
            f"iter_time=0.01, loss_ctc={ctc}, loss_att=2.0{extra}, grad_norm=1.0")


def results(epoch, steps):
    return (f"[vm] 2026-12-01 00:00:00,000 (trainer:394) INFO: {epoch}epoch results: [train] loss_ctc=2.0, "
            f"total_count={steps}, [valid] loss_ctc=1.0")


def write_log(tmp_path, name, lines):
    d = tmp_path / name
    d.mkdir()
    (d / "train.log").write_text("\n".join(lines) + "\n")
    return d


def test_exit_is_the_first_window_below_the_threshold_with_global_steps(tmp_path):
    mod = load_script(SCRIPT)
    d = write_log(tmp_path, "tok", [line(1, 1, 20, 30.0, True), line(1, 21, 40, 2.6, True), results(1, 170),
                                    line(2, 1, 20, 2.6, True), line(2, 21, 40, 1.4, True), line(2, 41, 60, 0.9, True)])
    e = mod.plateau_exit("tok", d, tokens_per_utt=4.6, threshold=1.5)
    assert (e.epoch, e.window_end, e.global_step, e.per_token) == (2, 40, 210, True)
    never = mod.plateau_exit("tok", d, tokens_per_utt=4.6, threshold=0.5)
    assert never.epoch is None and never.global_step is None


def test_per_utterance_logs_are_divided_by_the_mean_tokens(tmp_path):
    mod = load_script(SCRIPT)
    shape = tmp_path / "text_shape.word"
    shape.write_text("a 2,12\nb 4,12\nc 6,12\n")
    tokens = mod.mean_tokens_per_utterance(shape)
    assert tokens == 4.0
    # 6.4 per utterance = 1.6 per token (not below 1.5); 5.6 = 1.4 (below)
    d = write_log(tmp_path, "utt", [line(1, 1, 20, 6.4, False), line(1, 21, 40, 5.6, False)])
    e = mod.plateau_exit("utt", d, tokens, 1.5)
    assert (e.epoch, e.global_step, e.per_token) == (1, 40, False)


def test_bad_inputs_are_named(tmp_path):
    mod = load_script(SCRIPT)
    bad = tmp_path / "text_shape"
    bad.write_text("a 3\nb\n")
    with pytest.raises(ValueError, match="text_shape:2"):
        mod.mean_tokens_per_utterance(bad)
    d = write_log(tmp_path, "empty", [results(1, 10)])
    with pytest.raises(ValueError, match="no '<E>epoch:train"):
        mod.plateau_exit("empty", d, 4.6, 1.5)
