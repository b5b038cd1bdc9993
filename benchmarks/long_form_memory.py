"""Peak memory (RSS) of long-form input: decoding several minutes, and one training step at the fallback rate.

Usage (one scenario per process, so that the peak belongs to it):

    .venv/bin/python benchmarks/long_form_memory.py --scenario decode --minutes 3 [--max_segment_sec 0]
    .venv/bin/python benchmarks/long_form_memory.py --scenario train --minutes 5 --frame_rate_hz 50
    .venv/bin/python benchmarks/long_form_memory.py --scenario decode --minutes 3 \
        --asr_train_config egs2/fsdd_digits/asr1/exp/asr_x/config.yaml --asr_model_file .../valid.acc.ave.pth

The audio is FSDD recordings joined end to end (16 kHz).  Without a model the
tiny untrained model of ``tests/factory.py`` is used.  Decoding goes through
the plugin's ``Speech2Text`` (beam 2, CTC weight 0.3, at most ``--max_tokens``
output tokens: ESPnet's CTC prefix scorer loops over all encoder frames in
Python at every output step, so an unbounded untrained decoder would take hours).
The training step is the model's forward + backward (``--asr_train_config``
or the tiny ``token_normalized`` model) with
the ``dynres`` frontend in training mode, the utterance planned at
``--frame_rate_hz`` (what the sampler plans for a lone utterance over
``batch_bins``, down to the fallback rate).  Peak RSS is
``resource.getrusage(RUSAGE_SELF).ru_maxrss``; the RSS before the long input
(model and audio loaded) is given for comparison.  Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))

import espnet_dynres  # noqa: E402,F401
from factory import TOKENS, build_tiny_model, real_utterances, write_tiny_asr_model  # noqa: E402


def rss_mib() -> float:
    """Current resident set size (MiB), from /proc."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def long_audio(minutes: float) -> torch.Tensor:
    """FSDD recordings joined until ``minutes`` of 16 kHz audio: ``(T_samples,)`` float32."""
    need = int(minutes * 60 * 16000)
    parts, total, start = [], 0, 0
    while total < need:
        chunk = real_utterances(1, concat=50, start=start)[0]
        parts.append(chunk)
        total += len(chunk)
        start = (start + 50) % 2950
    return torch.cat(parts)[:need]


def decode(args) -> dict:
    from espnet_dynres.bin.asr_inference import Speech2Text

    if args.asr_train_config:
        config, weights = args.asr_train_config, args.asr_model_file
    else:
        config, weights = write_tiny_asr_model(Path(tempfile.mkdtemp()) / "model", token_type="word")
    speech = long_audio(args.minutes)
    s2t = Speech2Text(asr_train_config=config, asr_model_file=weights, beam_size=2, ctc_weight=0.3,
                      maxlenratio=-float(args.max_tokens),  # < 0: a fixed bound (an untrained decoder never ends)
                      max_segment_sec=args.max_segment_sec or None)
    before = rss_mib()
    start = time.perf_counter()
    text = s2t(speech, fs_hz=16000, utt_id="long")[0][0]
    return dict(before_mib=before, seconds=time.perf_counter() - start, hyp_words=len((text or "").split()))


def train_step(args) -> dict:
    torch.manual_seed(0)
    if args.asr_train_config:
        from espnet2.tasks.asr import ASRTask

        model, _ = ASRTask.build_model_from_file(args.asr_train_config, args.asr_model_file, "cpu")
        vocab = model.vocab_size
    else:
        model, vocab = build_tiny_model(), len(TOKENS)
    model.train()
    speech = long_audio(args.minutes)[None, :]  # (1, T_samples)
    lengths = torch.tensor([speech.size(1)])
    frames = 1 + int(speech.size(1) * args.frame_rate_hz / 16000)
    text = torch.randint(2, vocab - 1, (1, int(args.minutes * 60 * 2)))  # 2 tokens/s
    before = rss_mib()
    start = time.perf_counter()
    # The sampler's plan reaches the model as the batch key speech_frames.
    loss, _, _ = model(speech, lengths, text, torch.tensor([text.size(1)]), speech_frames=torch.tensor([frames]))
    loss.backward()
    return dict(before_mib=before, seconds=time.perf_counter() - start, frames=frames, loss=float(loss))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=("decode", "train"), required=True)
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--frame_rate_hz", type=float, default=50.0, help="train: planned frame rate")
    ap.add_argument("--max_tokens", type=int, default=20, help="decode: output length bound per segment (tokens)")
    ap.add_argument("--max_segment_sec", type=float, default=60.0, help="decode: segment length (s); 0 = one piece")
    ap.add_argument("--asr_train_config")
    ap.add_argument("--asr_model_file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    result = decode(args) if args.scenario == "decode" else train_step(args)
    result.update(scenario=args.scenario, minutes=args.minutes, peak_rss_mib=peak_rss_mib(),
                  max_segment_sec=args.max_segment_sec if args.scenario == "decode" else None,
                  model=args.asr_model_file or "tiny (tests/factory.py)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
