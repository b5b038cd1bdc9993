"""The command-line tools run as a user runs them, each in its own process: what they print on standard
output is theirs alone (ESPnet's import notices, such as "Failed to import Flash Attention", go to
stderr), and ``--help`` lists the plugin's own options."""

import json
import subprocess
import sys

import pytest

from factory import REPO_ROOT, write_shape_files


def run(*argv):
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)


@pytest.mark.slow
def test_audit_json_on_stdout_is_json_in_a_fresh_process(tmp_path):
    shape_files, _ = write_shape_files(tmp_path, [16000 * d for d in (1, 2, 3, 4, 5, 6)])
    done = run("espnet_dynres.bin.audit_batches", "--config", "conf/train_asr_conformer_dynres_cpu.yaml",
               "--speech_shape", shape_files[0], "--json", "-")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)  # the whole of stdout
    assert summary["num_utterances"] == 6 and sum(summary["frame_rate_histogram"].values()) == 6


@pytest.mark.slow
def test_asr_inference_help_lists_max_segment_sec():
    done = run("espnet_dynres.bin.asr_inference", "--help")
    assert done.returncode == 0 and "--max_segment_sec" in done.stdout and "0 = never segment" in done.stdout
