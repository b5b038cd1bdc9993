import json

import pytest

from espnet_dynres.bin.audit_batches import main
from factory import write_shape_files

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def shape_files(tmp_path):
    # 0.4 s to 30 s, tokens ~ 1 per 0.6 s (as the digit corpus).
    samples = [int(16000 * 0.4 * 1.03**i) for i in range(150)]
    files, _ = write_shape_files(tmp_path, samples, tokens=[max(1, n // 9600) for n in samples])
    return files


@pytest.mark.parametrize(
    "batch_type, extra",
    [
        ("numel", ["--batch_bins", "320000"]),
        ("folded", ["--batch_size", "16"]),
        ("dynres", ["--batch_bins", "2000", "--fs", "16000", "--hop_length", "160",
                    "--min_frame_rate_hz", "70", "--max_frame_rate_hz", "130"]),
    ],
)
def test_cli_end_to_end(tmp_path, shape_files, capsys, batch_type, extra):
    plot, summary = tmp_path / f"{batch_type}.png", tmp_path / f"{batch_type}.json"
    argv = ["--batch_type", batch_type, "--speech_shape", shape_files[0], "--text_shape", shape_files[1],
            "--plot", str(plot), "--json", str(summary)] + extra
    assert main(argv) == 0
    out = capsys.readouterr().out
    for label in ("batches", "batch size", "padding fraction", "tokens per batch", "composition change"):
        assert label in out
    assert plot.read_bytes()[:8] == PNG_MAGIC and plot.stat().st_size > 10000
    result = json.loads(summary.read_text())
    assert result["batch_type"] == batch_type
    assert result["num_utterances"] == result["num_utterances_in_batches"] == 150
    assert sum(result["tokens"][k] is not None for k in ("min", "p5", "median", "p95", "max", "cv")) == 6
    if batch_type == "dynres":
        assert result["padding_fraction"] == 0.0 and result["num_padded_batches"] == 0
        assert sum(result["batch_kinds"].values()) == result["num_batches"] and result["batch_kinds"]["padded"] == 0
        assert result["num_over_budget_batches"] == 0 and result["frames"]["max"] <= 2000
    else:
        assert result["composition_change"] == 0.0
        assert 0.0 < result["padding_fraction"] < 0.5


def test_cli_json_to_stdout_without_text_shape(shape_files, capsys):
    assert main(["--batch_type", "sorted", "--speech_shape", shape_files[0], "--json", "-"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    assert result["tokens"] is None and result["num_batches"] == 150 // 20


def test_cli_dynres_needs_a_frame_budget(shape_files):
    with pytest.raises(SystemExit, match="batch_bins"):
        main(["--batch_type", "dynres", "--speech_shape", shape_files[0]])


def test_config_gives_the_same_audit_as_the_equivalent_flags(tmp_path, shape_files, capsys):
    """--config train.yaml reads the sampler options and the dynres frontend's rate settings."""
    import yaml

    from factory import RECIPE_DIR

    conf = yaml.safe_load((RECIPE_DIR / "conf" / "train_asr_conformer_dynres_cpu.yaml").read_text())
    conf.update(batch_bins=2500, max_batch_size=6, seed=4)
    conf["frontend_conf"]["target_frame_rate_hz"] = 85
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(conf))
    common = ["--speech_shape", shape_files[0], "--text_shape", shape_files[1], "--json", "-"]

    def summary(argv):
        assert main(argv) == 0
        out = capsys.readouterr().out
        return json.loads(out[out.index("{"):])

    from_config = summary(["--config", str(config)] + common)
    from_flags = summary(["--batch_type", "dynres", "--batch_bins", "2500", "--max_batch_size", "6", "--seed", "4",
                          "--hop_length", "160", "--min_frame_rate_hz", "70", "--max_frame_rate_hz", "130",
                          "--target_frame_rate_hz", "85"] + common)
    from_config.pop("build_time_sec"), from_flags.pop("build_time_sec")
    assert from_config == from_flags
    assert from_config["batch_size"]["max"] <= 6
    overridden = summary(["--config", str(config), "--batch_bins", "5000"] + common)
    assert overridden["num_batches"] < from_config["num_batches"]  # the command line wins


def test_epoch_audits_that_epochs_plan_under_a_curriculum(tmp_path, shape_files, capsys):
    """--epoch e audits epoch e's plan: under curriculum_epochs 2 epoch 1 costs fewer frames than epoch 3."""
    import yaml

    from factory import RECIPE_DIR

    conf = yaml.safe_load((RECIPE_DIR / "conf" / "ablation" / "train_asr_conformer_dynres_curriculum_cpu.yaml").read_text())
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({**conf, "batch_bins": 2500}))

    def frames(epoch):
        assert main(["--config", str(config), "--speech_shape", shape_files[0], "--text_shape", shape_files[1],
                     "--epoch", str(epoch), "--json", "-"]) == 0
        out = capsys.readouterr().out
        return json.loads(out[out.index("{"):])["total_frames"]

    first, second, third, fourth = (frames(e) for e in (1, 2, 3, 4))
    assert first < 0.9 * second and second < 0.9 * third  # epochs 1 and 2 of the curriculum: lower rates
    assert abs(third - fourth) < 0.01 * third  # after it: the rule (batches differ a little every epoch)


def test_json_to_stdout_is_only_json(shape_files, capsys):
    assert main(["--batch_type", "dynres", "--batch_bins", "2000", "--hop_length", "160", "--speech_shape",
                 shape_files[0], "--text_shape", shape_files[1], "--json", "-"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)  # the whole of stdout
    assert result["frames"]["mean"] > 0 and result["audio_sec"]["p95"] >= result["audio_sec"]["p5"]
    assert "batch type" in captured.err and "frames per batch" in captured.err


def test_espnet_batch_types_are_audited_as_the_trainer_builds_them(tmp_path):
    """The same shape files through ESPnet's own iterator builder (the trainer's arguments, its
    default sort order) and through the audit CLI's defaults give the same batches, in order."""
    import argparse

    from espnet2.tasks.asr import ASRTask
    from espnet2.train.distributed_utils import DistributedOption
    from espnet_dynres.bin.audit_batches import parse_args
    from espnet_dynres.batch_audit import build_batches
    from factory import write_data_dir

    data = write_data_dir(tmp_path / "data", count=30, start=1200)
    for batch_type, budget in (("numel", ["--batch_bins", "60000"]), ("folded", ["--batch_size", "4"])):
        cli = parse_args(["--batch_type", batch_type, "--speech_shape", str(data / "speech_shape"),
                          "--text_shape", str(data / "text_shape.word"), *budget])
        audit = build_batches(batch_type, cli.speech_shape, cli.text_shape, batch_size=cli.batch_size,
                              batch_bins=cli.batch_bins or 1000000, fold_lengths=[80000, 150],
                              sort_in_batch=cli.sort_in_batch, sort_batch=cli.sort_batch).epoch1
        d = str(data)
        args = ASRTask.get_parser().parse_args([
            "--output_dir", str(tmp_path / "unused"), "--token_list", f"{d}/tokens.txt", "--token_type", "word",
            "--use_preprocessor", "true", "--batch_type", batch_type,
            "--fold_length", "80000", "--fold_length", "150", *budget,
            "--train_data_path_and_name_and_type", f"{d}/wav.scp,speech,sound",
            "--train_data_path_and_name_and_type", f"{d}/text,text,text",
            "--train_shape_file", f"{d}/speech_shape", "--train_shape_file", f"{d}/text_shape.word",
            "--valid_data_path_and_name_and_type", f"{d}/wav.scp,speech,sound",
            "--valid_shape_file", f"{d}/speech_shape"])
        assert isinstance(args, argparse.Namespace)
        factory = ASRTask.build_iter_factory(args, DistributedOption(distributed=False), mode="train")
        assert [tuple(b) for b in factory.sampler] == [tuple(b) for b in audit], batch_type


def test_match_gives_the_dynres_budget_with_the_references_audio_per_step(tmp_path, shape_files, capsys):
    import yaml

    reference = tmp_path / "numel.yaml"
    reference.write_text(yaml.safe_dump({"batch_type": "numel", "batch_bins": 320000}))
    common = ["--speech_shape", shape_files[0], "--text_shape", shape_files[1], "--json", "-"]
    assert main(["--batch_type", "dynres", "--batch_bins", "500", "--hop_length", "160", "--match", str(reference)]
                + common) == 0
    match = json.loads(capsys.readouterr().out)["match"]
    assert main(["--batch_type", "numel", "--batch_bins", "320000"] + common) == 0
    numel_sec = json.loads(capsys.readouterr().out)["audio_sec"]["mean"]
    assert match["reference_audio_per_batch_sec"] == pytest.approx(numel_sec)
    assert match["reference_figures"]["mean_audio_sec"] == pytest.approx(numel_sec)
    assert main(["--batch_type", "dynres", "--batch_bins", str(match["batch_bins_mean_matched"]), "--hop_length",
                 "160"] + common) == 0
    assert json.loads(capsys.readouterr().out)["audio_sec"]["mean"] == pytest.approx(numel_sec, rel=0.1)


def test_match_by_default_suggests_a_budget_whose_largest_batch_fits_the_references(tmp_path, shape_files, capsys):
    """The mean-matched value can plan a fuller largest batch than the reference's (memory); the default
    suggestion's largest batch holds no more B x T frames than the reference's largest, and the largest
    value that does; it works without a placeholder batch_bins, auditing the suggested value."""
    import yaml

    reference = tmp_path / "numel.yaml"
    reference.write_text(yaml.safe_dump({"batch_type": "numel", "batch_bins": 320000}))
    assert main(["--batch_type", "dynres", "--hop_length", "160", "--match", str(reference), "--speech_shape",
                 shape_files[0], "--text_shape", shape_files[1], "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    match = out["match"]
    largest = match["reference_figures"]["max_frames"]
    assert match["batch_bins"] == min(match["batch_bins_memory_safe"], match["batch_bins_mean_matched"])
    for name in ("batch_bins", "batch_bins_memory_safe"):
        assert match["figures"][name]["max_frames"] <= largest
    assert out["frames"]["max"] <= largest and out["audio_sec"]["mean"] == pytest.approx(
        match["figures"]["batch_bins"]["mean_audio_sec"])  # the audited value is the suggestion
    assert match["figures"]["batch_bins_mean_matched"]["mean_audio_sec"] == pytest.approx(
        match["reference_figures"]["mean_audio_sec"], rel=0.1)
    # The largest such value: one more frame of budget plans a batch over the reference's largest.
    from espnet_dynres.batch_audit import build_batches
    from espnet_dynres.samplers.batch_bins_search import fullest_batch_frames
    from espnet_dynres.bin.audit_batches import build_policy, parse_args

    policy = build_policy(parse_args(["--batch_type", "dynres", "--hop_length", "160", "--speech_shape", shape_files[0]]))
    bound = match["batch_bins_memory_safe"]
    over = build_batches("dynres", shape_files[0], shape_files[1], batch_bins=bound + 1, policy=policy)
    assert fullest_batch_frames(over.sampler, (1, 2)) > largest or bound + 1 > 1.5 * largest


def test_audit_and_training_plan_the_same_batches_with_repeated_tokens(tmp_path):
    """The CTC minimum is computed once: the audit CLI (``--text``, ``--token_list``) and training's
    iterator builder plan identical dynres batches and frame counts on transcripts full of adjacent
    repeats (``one one one ...``, where a blank must separate every repeat, so ``U + R`` is about twice
    the token count), and there the minimum binds (the plan differs from one without it)."""
    import yaml

    from espnet2.tasks.asr import ASRTask
    from espnet2.train.distributed_utils import DistributedOption
    from factory import RECIPE_FRONTEND, TOKENS, task_args, write_data_dir

    data = write_data_dir(tmp_path / "data", count=24, start=300, concat=2)
    lines, shapes = [], []
    for line in (data / "speech_shape").read_text().splitlines():
        utt, samples = line.split()
        standard_frames = 1 + int(samples) // 160
        repeats = max(1, round(0.9 * standard_frames / 8))  # conv2d: U + R = 2k - 1 tokens need ~8k frames
        lines.append(f"{utt} {' '.join(['one'] * repeats)}")
        shapes.append(f"{utt} {repeats},{len(TOKENS)}")
    (data / "text").write_text("\n".join(lines) + "\n")
    (data / "text_shape.word").write_text("\n".join(shapes) + "\n")
    budget = "700"

    args = task_args(data, "--batch_bins", budget, "--output_dir", str(tmp_path / "exp"))
    sampler = ASRTask.build_iter_factory(args, DistributedOption(distributed=False), mode="train").sampler
    training = {"batches": [list(b) for b in [b.keys for b in sampler.planned_batches(1)]], "frames": [b.plan.num_frames for b in sampler.planned_batches(1)],
                "utt_frames": [list(f) for f in [b.plan.frames for b in sampler.planned_batches(1)]]}

    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({"batch_type": "dynres", "batch_bins": int(budget), "frontend": "dynres",
                                      "frontend_conf": dict(RECIPE_FRONTEND), "model": "token_normalized"}))
    common = ["--speech_shape", str(data / "speech_shape"), "--text_shape", str(data / "text_shape.word"),
              "--json", str(tmp_path / "summary.json")]

    def audit(*extra, config=config):
        dump = tmp_path / "batches.json"
        assert main(["--config", str(config)] + common + ["--dump_batches", str(dump)] + list(extra)) == 0
        return {k: v for k, v in json.loads(dump.read_text()).items() if k != "epoch"}

    with_ctc = audit("--text", str(data / "text"), "--token_list", str(data / "tokens.txt"), "--token_type", "word")
    assert with_ctc == training
    # An experiment's config.yaml (as ESPnet writes it: data entries as lists, the token list, "required")
    # gives the transcripts and the tokens itself.
    exp_config = tmp_path / "config.yaml"
    exp_config.write_text(yaml.safe_dump({
        **yaml.safe_load(config.read_text()), "token_list": TOKENS, "token_type": "word", "use_preprocessor": True,
        "required": ["output_dir", "token_list"],
        "train_data_path_and_name_and_type": [[str(data / "wav.scp"), "speech", "sound"],
                                              [str(data / "text"), "text", "text"]]}))
    assert audit(config=exp_config) == training
    assert json.loads((tmp_path / "summary.json").read_text())["ctc_minimum"].startswith("from ")
    assert audit() != training  # without the transcripts the minimum is not applied, and here it binds
    assert json.loads((tmp_path / "summary.json").read_text())["ctc_minimum"].startswith("not applied")
