"""Importing the plugin leaves a stock ESPnet configuration (numel batches, DefaultFrontend,
model: espnet) exactly as ESPnet runs it: same batches, same losses, no refusals.

Each side runs in a fresh interpreter (the plugin registers itself on import), on real
utterances with one empty transcript (which the plugin's own checks only name in a warning,
and only when one of its switches is on).
"""

import json
import subprocess
import sys

import pytest

from factory import write_data_dir

pytestmark = pytest.mark.slow  # trainings in subprocesses

SCRIPT = r'''
import json, sys
import torch
if sys.argv[1] == "plugin":
    import espnet_dynres  # noqa: F401
from espnet2.tasks.asr import ASRTask
from espnet2.train.distributed_utils import DistributedOption

import pytest

from espnet2.torch_utils.set_all_random_seed import set_all_random_seed

d, out = sys.argv[2], sys.argv[3]
data = ["--train_data_path_and_name_and_type", f"{d}/wav.scp,speech,sound",
        "--train_data_path_and_name_and_type", f"{d}/text,text,text",
        "--valid_data_path_and_name_and_type", f"{d}/wav.scp,speech,sound",
        "--valid_data_path_and_name_and_type", f"{d}/text,text,text",
        "--train_shape_file", f"{d}/speech_shape", "--train_shape_file", f"{d}/text_shape.word",
        "--valid_shape_file", f"{d}/speech_shape", "--valid_shape_file", f"{d}/text_shape.word"]
args = ASRTask.get_parser().parse_args(data + [
    "--output_dir", out, "--token_list", f"{d}/tokens.txt", "--token_type", "word", "--use_preprocessor", "true",
    "--batch_type", "numel", "--batch_bins", "400000", "--seed", "3", "--num_workers", "0",
    "--frontend", "default", "--frontend_conf", "n_mels=20", "--specaug", "specaug",
    "--specaug_conf", "time_mask_width_ratio_range=[0.0,0.05]", "--specaug_conf", "apply_time_warp=false",
    "--encoder", "conformer", "--encoder_conf", "output_size=16", "--encoder_conf", "attention_heads=2",
    "--encoder_conf", "linear_units=32", "--encoder_conf", "num_blocks=1", "--encoder_conf", "use_cnn_module=true",
    "--decoder", "transformer", "--decoder_conf", "attention_heads=2", "--decoder_conf", "linear_units=32",
    "--decoder_conf", "num_blocks=1", "--model", "espnet", "--model_conf", "ctc_weight=0.3",
    "--grad_clip", "5"])
set_all_random_seed(args.seed)
model = ASRTask.build_model(args).train()
result = {"batches": [], "losses": [], "weights": []}
for mode in ("train", "valid"):
    factory = ASRTask.build_iter_factory(args, DistributedOption(distributed=False), mode=mode)
    for keys, batch in factory.build_iter(2):
        loss, stats, weight = model(**{k: v for k, v in batch.items() if not k.endswith("utt_id")})
        result["batches"].append(list(keys))
        result["losses"].append(float(loss))
        result["weights"].append(float(weight))
print("RESULT " + json.dumps(result))
'''


def run_side(tmp_path, side, data_dir):
    out = subprocess.run([sys.executable, "-c", SCRIPT, side, str(data_dir), str(tmp_path / side)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), out.stderr


def test_stock_config_runs_identically_with_the_plugin_imported(tmp_path):
    data_dir = write_data_dir(tmp_path / "data", count=10, concat=2)
    text = (data_dir / "text").read_text().splitlines()
    text[3] = text[3].split()[0]  # one empty transcript
    (data_dir / "text").write_text("\n".join(text) + "\n")
    stock, _ = run_side(tmp_path, "stock", data_dir)
    plugin, plugin_log = run_side(tmp_path, "plugin", data_dir)
    assert len(stock["batches"]) >= 2 and sum(len(b) for b in stock["batches"]) == 20  # train + valid, all 10 each
    assert plugin == stock  # same batches, bit-identical losses and weights
    assert "have no tokens" not in plugin_log  # the plugin's checks stay out of a stock configuration
