"""benchmarks/restat_cost.py: both passes measured on the same model and budget; the long-form writer."""

import soundfile

from factory import FSDD_DIR, REPO_ROOT, load_script, write_data_dir

SCRIPT = REPO_ROOT / "benchmarks" / "restat_cost.py"
CI_CONFIG = REPO_ROOT / "conf" / "train_asr_conformer_dynres_ci.yaml"


def test_both_passes_are_measured_and_the_restat_keeps_the_budget(tmp_path):
    rc = load_script(SCRIPT)
    data = write_data_dir(tmp_path / "data", count=6, start=900, concat=3)
    restat = rc.measure("restat", CI_CONFIG, data, data)
    valid = rc.measure("valid", CI_CONFIG, data, data)
    per_layer = rc.measure("restat_per_layer", CI_CONFIG, data, data)
    assert restat["utterances"] == valid["utterances"] == per_layer["utterances"] == 6
    assert per_layer["input_frames"] == restat["input_frames"] and per_layer["seconds"] > 0
    assert restat["seconds"] > 0 and valid["seconds"] > 0
    # The sample cut to its batches' shortest members never has more frames than validation's padded batches.
    assert 0 < restat["input_frames"] <= valid["input_frames"]


def test_long_form_recordings_are_one_speaker_and_as_long_as_asked(tmp_path):
    rc = load_script(SCRIPT)
    out = rc.make_long_form(tmp_path / "long", FSDD_DIR, count=2, duration_sec=8.0)
    lines = (out / "wav.scp").read_text().splitlines()
    texts = (out / "text").read_text().splitlines()
    assert len(lines) == len(texts) == 2
    for line in lines:
        info = soundfile.info(line.split(maxsplit=1)[1])
        assert info.samplerate == 16000 and 8.0 <= info.duration < 10.0
    assert len({line.split("-")[0] for line in lines}) == 2  # one speaker per recording, two speakers
