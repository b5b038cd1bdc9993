"""A plugin-trained model decodes with stock ESPnet: ``stock_espnet_config`` and its CLI.

The decisive test runs stock ESPnet in a fresh interpreter that never imports the plugin and
compares hypotheses and scores with the plugin's own entry point."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

from espnet_dynres.glue.stock_config import stock_espnet_config
from factory import REPO_ROOT, real_utterances, write_tiny_asr_model, write_wav

pytestmark = pytest.mark.slow  # trainings in subprocesses

SPECAUG = dict(apply_time_warp=False, apply_freq_mask=True, freq_mask_width_range=[0, 4], num_freq_mask=1,
               apply_time_mask=True, time_mask_width_ratio_range=[0.0, 0.05], num_time_mask=1)
DECODE = dict(beam_size=2, ctc_weight=0.3, nbest=1)


def test_plugin_names_and_keys_are_mapped_and_a_stock_config_is_unchanged():
    config = {"frontend": "dynres", "frontend_conf": {"fs": "16k", "hop_length": 160, "min_frame_rate_hz": 70,
                                                      "method": "hop"},
              "specaug": "dynres", "specaug_conf": dict(SPECAUG), "model": "token_normalized",
              "model_conf": {"ctc_weight": 0.3, "batchnorm_restat_batches": 6}, "batch_type": "dynres",
              "valid_batch_type": None, "oversized": "warn", "batch_fill": "below", "shuffle_jitter": 0.5}
    out = stock_espnet_config(config)
    assert out["frontend"] == "default" and out["frontend_conf"] == {"fs": "16k", "hop_length": 160}
    assert out["specaug"] == "specaug" and out["specaug_conf"] == SPECAUG
    assert out["model"] == "espnet" and out["model_conf"] == {"ctc_weight": 0.3}
    assert out["batch_type"] == "numel" and out["valid_batch_type"] is None
    assert not {"oversized", "batch_fill", "shuffle_jitter"} & set(out)
    assert config["model"] == "token_normalized"  # the input is not modified
    stock = {"frontend": "default", "model": "espnet", "batch_type": "numel", "model_conf": {"ctc_weight": 0.3}}
    assert stock_espnet_config(stock) == stock
    with pytest.raises(ValueError, match="config.yaml"):
        stock_espnet_config({"frontend": "dynres"})


STOCK_DECODE = textwrap.dedent('''
    import json, sys
    import soundfile
    from espnet2.bin.asr_inference import Speech2Text
    config, model, *wavs = sys.argv[1:]
    if model.endswith(".zip"):
        from espnet_model_zoo.downloader import ModelDownloader
        files = ModelDownloader(cachedir=config).download_and_unpack(model)
        s2t = Speech2Text(**files, device="cpu", **DECODE)
    else:
        s2t = Speech2Text(asr_train_config=config, asr_model_file=model, device="cpu", **DECODE)
    out = []
    for w in wavs:
        text, _, ids, hyp = s2t(soundfile.read(w, dtype="float32")[0])[0]
        out.append([text, list(ids), float(hyp.score)])
    assert not any(m.startswith("espnet_dynres") for m in sys.modules), "the plugin was imported"
    print(json.dumps(out))
''').replace("DECODE", repr(DECODE).replace("{", "dict(").replace("}", ")").replace("'", "").replace(": ", "="))


def stock_decode(config, model, wavs):
    cmd = [sys.executable, "-c", STOCK_DECODE, str(config), str(model), *map(str, wavs)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["dynres", "token_normalized"])
def test_stock_espnet_and_espnet_model_zoo_decode_as_the_plugin_does(tmp_path, model):
    from espnet2.main_funcs.pack_funcs import pack
    from espnet_dynres.bin import export_espnet_config
    from espnet_dynres.bin.asr_inference import Speech2Text

    config, weights = write_tiny_asr_model(tmp_path / "exp", seed=3, model=model, specaug="dynres",
                                           specaug_conf=SPECAUG, token_type="word")
    wavs = [write_wav(tmp_path / f"u{i}.wav", w) for i, w in enumerate(real_utterances(3, concat=2, start=950))]
    plugin = Speech2Text(asr_train_config=str(config), asr_model_file=str(weights), device="cpu", **DECODE)
    import soundfile

    expected = []
    for w in wavs:
        text, _, ids, hyp = plugin(soundfile.read(w, dtype="float32")[0], fs_hz=16000, utt_id=w.stem)[0]
        expected.append([text, list(ids), float(hyp.score)])
    assert export_espnet_config.main(["--exp_dir", str(config.parent)]) == 0
    stock = config.parent / "config_espnet.yaml"
    assert yaml.safe_load(stock.read_text())["frontend"] == "default"
    assert stock_decode(stock, weights, wavs) == expected
    packed = tmp_path / "packed.zip"
    pack(files={"asr_model_file": str(weights)}, yaml_files={"asr_train_config": str(stock)}, option=[],
         outpath=str(packed))
    assert stock_decode(tmp_path / "zoo", packed, wavs) == expected


def test_without_the_plugin_the_original_config_fails_as_troubleshooting_says(tmp_path):
    config, weights = write_tiny_asr_model(tmp_path / "exp", token_type="word")
    done = subprocess.run([sys.executable, "-c", STOCK_DECODE, str(config), str(weights)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode != 0 and "must be one of" in done.stderr and "dynres" in done.stderr
    assert "must be one of" in (REPO_ROOT / "docs" / "troubleshooting.md").read_text()


def test_espnets_inference_command_decodes_the_exported_config_as_the_plugins_command(tmp_path):
    """``python -m espnet2.bin.asr_inference`` (stock, no plugin) with the exported config writes the
    same 1-best texts and scores as ``python -m espnet_dynres.bin.asr_inference`` with the original."""
    from espnet_dynres.bin import export_espnet_config

    config, weights = write_tiny_asr_model(tmp_path / "exp", seed=5, model="token_normalized", token_type="word")
    wavs = [write_wav(tmp_path / "wav" / f"u{i}.wav", w) for i, w in enumerate(real_utterances(3, concat=2, start=980))]
    scp = tmp_path / "wav.scp"
    scp.write_text("".join(f"u{i} {w}\n" for i, w in enumerate(wavs)))
    export_espnet_config.main(["--exp_dir", str(config.parent)])
    outputs = {}
    for module, cfg in (("espnet_dynres.bin.asr_inference", config),
                        ("espnet2.bin.asr_inference", config.parent / "config_espnet.yaml")):
        out = tmp_path / module
        cmd = [sys.executable, "-m", module, "--asr_train_config", str(cfg), "--asr_model_file", str(weights),
               "--data_path_and_name_and_type", f"{scp},speech,sound", "--output_dir", str(out), "--ngpu", "0",
               "--beam_size", "2", "--ctc_weight", "0.3", "--nbest", "1"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[module] = {name: (out / "1best_recog" / name).read_text() for name in ("text", "score", "token_int")}
    stock, plugin = outputs["espnet2.bin.asr_inference"], outputs["espnet_dynres.bin.asr_inference"]
    assert stock == plugin and len(stock["score"].splitlines()) == 3
