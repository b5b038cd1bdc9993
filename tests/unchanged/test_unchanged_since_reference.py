"""What a user sees has not moved since the reference commit, the last one before the re-estimate
became a trainer step: batch plans (epochs 1-5 of every ``batch_type: dynres`` config on two
corpora), batch audits, features, SpecAugment, the main config's first training steps (losses,
weights, gradient norms) and the BatchNorm statistics re-estimated after them, each computed by the
reference's package and by this checkout's, in separate processes on this machine
(:mod:`fingerprints`), and compared exactly.
"""

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REFERENCE_COMMIT = "807f4249e4d7fb1873f1ceacdbf7d03f8ad8b7cf"
ROOT = Path(__file__).resolve().parents[2]
FINGERPRINTS = Path(__file__).resolve().parent / "fingerprints.py"

@pytest.fixture(scope="module")
def reference_package(tmp_path_factory):
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{REFERENCE_COMMIT}^{{commit}}"],
                           capture_output=True)
    if found.returncode != 0:
        pytest.skip(f"this clone lacks the reference commit {REFERENCE_COMMIT} (a shallow clone?): "
                    "git fetch --unshallow, then rerun")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", REFERENCE_COMMIT, "espnet_dynres"],
                             capture_output=True, check=True).stdout
    out = tmp_path_factory.mktemp("reference")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return out


KINDS = ["plans", "features", "steps", "audits", "restat"]


def fingerprints(package_root: Path) -> dict:
    """Every kind's fingerprints computed by the package at ``package_root``, in one process."""
    env = dict(os.environ, PYTHONPATH=str(package_root), OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, str(FINGERPRINTS), *KINDS, "--repo", str(ROOT)], env=env,
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout[run.stdout.index("{"):])  # after any notice ESPnet prints on import


@pytest.fixture(scope="module")
def before(reference_package):
    return fingerprints(reference_package)


@pytest.fixture(scope="module")
def after():
    return fingerprints(ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("what", KINDS)
def test_what_a_user_sees_is_unchanged_since_the_reference(before, after, what):
    before, after = before[what], after[what]
    assert sorted(before) == sorted(after)
    changed = sorted(k for k in before if before[k] != after[k])
    assert not changed, {k: (before[k], after[k]) for k in changed}
