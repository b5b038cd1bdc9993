"""benchmarks/gpu_benchmark.py: the CPU dry run end to end, and its pure pieces.

The dry run exercises the GPU code paths (ESPnet-built model, optimizer and iterator,
autocast, per-step records, summary, batch_bins search, report) at tiny sizes; its
figures are not measurements and no timing is asserted.
"""

import contextlib
import io
import json

import pytest
import yaml

from factory import REPO_ROOT, load_script, write_data_dir

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_benchmark.py"
GPU_CONFIG = REPO_ROOT / "conf" / "train_asr_conformer_dynres.yaml"
FS_HZ = 16000
STEP_FIELDS = (
    "setup", "epoch", "step", "batch_size", "loader_wait_sec", "step_sec", "frontend_sec", "audio_sec",
    "feature_frames", "feature_padding_frames", "encoder_frames", "encoder_padding_frames",
    "peak_alloc_bytes", "peak_step_bytes", "loss", "tokens",
)


def load_benchmark():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def bench():
    return load_benchmark()


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory, bench):
    """One CPU dry run on 12 real 2-digit FSDD utterances (whole epochs, so both setups see all data).

    In-process (``main(argv)``, the command line's own entry) to share this process's
    ESPnet import; the output is captured from stdout.
    """
    tmp = tmp_path_factory.mktemp("gpu_bench")
    data = write_data_dir(tmp / "dump" / "train", count=12, concat=2)
    argv = [
        "--device", "cpu", "--dry_run", "--work_dir", str(tmp / "work"),
        "--dump_dir", str(tmp / "dump"), "--token_list", str(data / "tokens.txt"),
        "--epochs", "2", "--max_steps_per_epoch", "100", "--warmup_steps", "1", "--search_doublings", "1",
    ]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        bench.main(argv)
    results = tmp / "work" / "results"
    report = json.loads((results / "gpu_benchmark.json").read_text())
    lengths = {}
    for line in (data / "utt2num_samples").read_text().splitlines():
        utt, n = line.split()
        lengths[utt] = int(n)
    return report, (results / "gpu_benchmark.md").read_text(), stdout.getvalue(), lengths


def test_dry_run_records_every_step_field(dry_run):
    report, _, _, _ = dry_run
    assert report["meta"]["dry_run"] is True
    for name in ("dynres", "baseline"):
        steps = report["steps"][name]
        assert steps, f"no step recorded for {name}"
        for s in steps:
            assert set(STEP_FIELDS) <= set(s), set(STEP_FIELDS) - set(s)
            assert s["setup"] == name and s["batch_size"] >= 1 and s["tokens"] >= s["batch_size"]
            assert 0 <= s["frontend_sec"] <= s["step_sec"] and s["loader_wait_sec"] >= 0
            assert s["peak_alloc_bytes"] is None  # no CUDA memory on CPU: reported as n/a, not 0
            # conv2d subsampling: fewer encoder frames than feature frames, but some.
            assert 0 < s["encoder_frames"] < s["feature_frames"]


def test_both_setups_train_on_the_same_audio(dry_run):
    report, _, _, lengths = dry_run
    total_sec = sum(lengths.values()) / FS_HZ
    for name in ("dynres", "baseline"):
        for epoch in (1, 2):
            audio = sum(s["audio_sec"] for s in report["steps"][name] if s["epoch"] == epoch)
            assert audio == pytest.approx(total_sec, rel=1e-9), (name, epoch)


def test_dynres_has_no_padding_and_the_baseline_does(dry_run):
    report, _, _, _ = dry_run
    dyn = report["steps"]["dynres"]
    assert all(s["feature_padding_frames"] == 0 for s in dyn if not s["frame_rate_fallback"])
    base = report["steps"]["baseline"]
    assert sum(s["feature_padding_frames"] for s in base) > 0  # mixed lengths padded to the longest
    assert report["summary"]["dynres"]["feature_padding_share"] < report["summary"]["baseline"]["feature_padding_share"]


def test_summary_and_ratios_follow_from_the_steps(dry_run, bench):
    report, _, _, _ = dry_run
    warmup = report["meta"]["warmup_steps"]
    for name in ("dynres", "baseline"):
        kept = [s for s in report["steps"][name] if s["step"] > warmup]
        summ = report["summary"][name]
        assert summ["steps"] == len(kept)
        wall = sum(s["step_sec"] + s["loader_wait_sec"] for s in kept)
        assert summ["throughput_audio_sec_per_sec"] == pytest.approx(sum(s["audio_sec"] for s in kept) / wall)
    r = report["ratios"]["throughput_audio_sec_per_sec"]
    s = report["summary"]
    assert r == pytest.approx(s["dynres"]["throughput_audio_sec_per_sec"] / s["baseline"]["throughput_audio_sec_per_sec"])
    assert report["ratios"]["peak_step_bytes"] is None  # CPU: no ratio invented


def test_batch_bins_search_ran_for_both_setups(dry_run):
    report, _, _, _ = dry_run
    for name in ("dynres", "baseline"):
        res = report["batch_bins_search"][name]
        start = report["meta"]["batch_bins"][name]
        assert res["tried"] and res["tried"][0]["batch_bins"] == start
        assert [t["batch_bins"] for t in res["tried"]] == [start * 2**k for k in range(len(res["tried"]))]
        assert res["largest_fitting"] in [t["batch_bins"] for t in res["tried"] if t["fits"]]
        assert res["largest_fitting_sec"] > 0


def test_report_is_labelled_a_dry_run(dry_run):
    report, md, stdout, _ = dry_run
    assert "DRY RUN" in md and "NOT a measurement" in md
    for row in ("throughput, audio s per wall s", "peak step memory", "frontend share of step time",
                "largest batch_bins that fits, dynres", "largest batch_bins that fits, baseline"):
        assert row in md, row
    assert md.strip() in stdout


def test_baseline_config_is_the_same_model_with_stock_pieces(bench):
    conf = yaml.safe_load(GPU_CONFIG.read_text())
    base = bench.derive_baseline_config(conf)
    assert (base["batch_type"], base["frontend"], base["model"]) == ("numel", "default", "espnet")
    hop = conf["frontend_conf"]["hop_length"]
    assert base["batch_bins"] == conf["batch_bins"] * hop  # frames -> samples: same seconds per batch
    assert not set(bench.DYNRES_ONLY_FRONTEND_KEYS) & set(base["frontend_conf"])
    for key in ("encoder", "encoder_conf", "decoder", "decoder_conf", "specaug", "specaug_conf", "optim",
                "optim_conf", "scheduler", "scheduler_conf", "model_conf"):
        assert base.get(key) == conf.get(key), key
    assert conf["batch_type"] == "dynres"  # the input is not modified
    with pytest.raises(ValueError, match="batch_type: dynres"):
        bench.derive_baseline_config(base)


def test_doubling_search_stops_at_the_first_size_that_does_not_fit(bench):
    capacity = 5000
    res = bench.doubling_search(1000, lambda bins: (bins <= capacity, True, "fake"), max_doublings=6)
    assert res["largest_fitting"] == 4000 and res["first_failing"] == 8000
    assert [t["batch_bins"] for t in res["tried"]] == [1000, 2000, 4000, 8000]


def test_doubling_search_reports_data_limit_cap_and_time(bench):
    grows = iter([True, True, False])
    res = bench.doubling_search(10, lambda bins: (True, next(grows), ""), max_doublings=6)
    assert res["largest_fitting"] == 40 and res["first_failing"] is None and "data set" in res["stopped_because"]
    res = bench.doubling_search(10, lambda bins: (True, True, ""), max_doublings=2)
    assert res["largest_fitting"] == 40 and "cap" in res["stopped_because"]
    res = bench.doubling_search(10, lambda bins: (True, True, ""), max_doublings=2, out_of_time=lambda: True)
    assert res["largest_fitting"] is None and res["tried"] == [] and "time" in res["stopped_because"]


def test_summarize_refuses_when_only_warmup_steps_ran(bench):
    steps = [dict(step=1, step_sec=1.0, loader_wait_sec=0.0, audio_sec=1.0)]
    with pytest.raises(ValueError, match="warm-up"):
        bench.summarize(steps, warmup_steps=1)
