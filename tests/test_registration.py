import subprocess

import pytest
import sys

from espnet2.samplers.build_batch_sampler import BATCH_TYPES
from espnet2.tasks.asr import frontend_choices, model_choices

from espnet_dynres.glue import registration
from factory import REPO_ROOT


def test_names_are_registered_with_espnet():
    assert frontend_choices.get_class("dynres") is registration.FRONTENDS["dynres"]
    assert model_choices.get_class("token_normalized") is registration.MODELS["token_normalized"]
    assert model_choices.get_class("dynres") is registration.MODELS["dynres"]
    assert "dynres" in BATCH_TYPES


@pytest.mark.slow
def test_launcher_runs_modules_with_the_plugin_registered():
    launcher = REPO_ROOT / ".venv" / "bin" / "espnet_dynres_python"
    cmd = [str(launcher)] if launcher.exists() else [sys.executable, "-m", "espnet_dynres.glue.launcher"]
    code = "from espnet2.tasks.asr import frontend_choices as f; print('dynres' in f.classes)"
    out = subprocess.run(cmd + ["-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True"
    # ESPnet's own entry point (as asr.sh calls it) sees the plugin's batch type.
    out = subprocess.run(cmd + ["-m", "espnet2.bin.asr_train", "--help"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "dynres" in out.stdout and "token_normalized" in out.stdout


def test_build_model_suggests_the_closest_key_for_a_conf_typo():
    from espnet2.tasks.asr import ASRTask
    from factory import tiny_asr_args

    with pytest.raises(TypeError, match="did you mean .n_mels."):
        ASRTask.build_model(tiny_asr_args(frontend_conf={"n_mel": 20}))
    with pytest.raises(TypeError, match="did you mean .ctc_weight."):
        ASRTask.build_model(tiny_asr_args(model_conf={"ctc_wieght": 0.3}))


def test_the_package_docstring_and_the_docs_name_exactly_the_registered_names():
    """Every place that lists what ``import espnet_dynres`` registers names all of them, no more."""
    import re

    import espnet_dynres
    from espnet_dynres.glue import registration
    from factory import REPO_ROOT

    registered = {("frontend", k) for k in registration.FRONTENDS} | {("specaug", k) for k in registration.SPECAUGS} \
        | {("model", k) for k in registration.MODELS} | {("batch_type", k) for k in registration.BATCH_TYPE_DOCS}
    assert len(registered) == 5
    doc = espnet_dynres.__doc__
    assert "five names" in doc
    named = set(re.findall(r"``(frontend|specaug|model|batch_type): (\w+)``", doc))
    assert named == registered
    for path in ("README.md", "docs/asr_sh.md"):
        text = (REPO_ROOT / path).read_text()
        assert "five names" in text and not re.search(r"\b(three|four|six) names\b", text), path
        missing = [f"{key}: {name}" for key, name in sorted(registered) if not re.search(rf"\b{key}: {name}\b", text)]
        assert not missing, f"{path} does not name {missing}"


@pytest.mark.slow
def test_import_registers_when_espnets_task_is_imported_and_does_not_import_it():
    """In a fresh process, ``import espnet_dynres`` (and the data helpers the recipe's scripts use) leaves
    ESPnet's ASR task unimported; the names are there the moment it is imported, and ESPnet's import
    notices stay off standard output."""
    code = "\n".join([
        "import sys",
        "import espnet_dynres, espnet_dynres.glue.data_checks",
        "assert 'espnet2.tasks.asr' not in sys.modules",
        "from espnet2.tasks.asr import ASRTask, frontend_choices, model_choices",
        "from espnet2.samplers.build_batch_sampler import BATCH_TYPES",
        "print(['dynres' in frontend_choices.classes, 'token_normalized' in model_choices.classes,"
        " 'dynres' in BATCH_TYPES])",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == "[True, True, True]\n"


def test_with_espnets_task_imported_already_the_plugin_registers_at_once(monkeypatch):
    """The other order (this process imported ESPnet's ASR task above): registration runs at once, and no
    import hook is left waiting."""
    import espnet2.tasks.asr  # noqa: F401

    from espnet_dynres.glue import import_hook

    calls = []
    monkeypatch.setattr(registration, "register", lambda: calls.append("registered"))
    import_hook.register_with_espnet()
    assert calls == ["registered"]
    assert not any(isinstance(f, import_hook._AsrTaskFinder) for f in sys.meta_path)
