"""Long-form input: minutes of audio decode (in segments), and a lone long utterance trains at the fallback rate.

Peak memory is measured by ``the long-form memory table in docs/troubleshooting.md`` (one process per
scenario), not asserted here.
"""

from __future__ import annotations

import pytest
import torch

from espnet_dynres.bin.asr_inference import Speech2Text, segment_bounds
from factory import TOKENS, build_tiny_model, plan_of, real_utterances, write_tiny_asr_model, frame_range

FS_HZ = 16000
MINUTES = 3


@pytest.fixture(scope="module")
def long_speech():
    """About 3 minutes of FSDD recordings joined end to end, ``(T_samples,)`` float32 at 16 kHz."""
    wavs = real_utterances(9, concat=45, start=100)
    speech = torch.cat(wavs)
    assert speech.numel() >= MINUTES * 60 * FS_HZ, f"only {speech.numel() / FS_HZ:.0f} s"
    return speech[: MINUTES * 60 * FS_HZ]


def test_segments_cover_the_input_and_cut_in_pauses(long_speech):
    bounds = segment_bounds(long_speech, fs_hz=FS_HZ, max_segment_sec=30.0)
    assert bounds[0][0] == 0 and bounds[-1][1] == long_speech.numel()
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # contiguous: no sample lost or repeated
    assert all(0 < end - start <= 30 * FS_HZ for start, end in bounds)
    assert len(bounds) >= MINUTES * 60 // 30
    # Each cut is at the quietest 10 ms of the 5 s before the limit: no louder than the median frame there.
    for (start, cut) in bounds[:-1]:
        window = long_speech[start + 25 * FS_HZ : start + 30 * FS_HZ]
        frames = window[: len(window) // 160 * 160].reshape(-1, 160).pow(2).mean(dim=1)
        at_cut = long_speech[cut - 80 : cut + 80].pow(2).mean()
        assert at_cut <= frames.median()


def test_minutes_of_audio_decode_in_segments(tmp_path, long_speech):
    config, weights = write_tiny_asr_model(tmp_path, token_type="word")
    # maxlenratio < 0: at most 3 tokens per segment (an untrained decoder never emits <eos>).
    s2t = Speech2Text(
        asr_train_config=config, asr_model_file=weights, beam_size=2, ctc_weight=0.3, maxlenratio=-3.0, max_segment_sec=30.0
    )
    results = s2t(long_speech, fs_hz=FS_HZ, utt_id="long")
    assert len(results) == 1
    text, tokens, token_ids, hyp = results[0]
    segments = len(segment_bounds(long_speech, fs_hz=FS_HZ, max_segment_sec=30.0))
    assert isinstance(text, str) and len(tokens) == len(token_ids) <= 3 * segments
    assert text.split() == [t for t in tokens if t not in ("<blank>", "<unk>", "<sos/eos>")]


def test_a_long_utterance_trains_at_the_fallback_rate(long_speech):
    model = build_tiny_model().train()
    policy = model.frontend.policy
    num_samples = long_speech.numel()
    frames = frame_range(policy, num_samples, policy.fallback_frame_rate_hz)[0]  # lowest count the policy allows
    text = torch.randint(2, len(TOKENS) - 1, (1, 60))
    feats, feats_lengths = model.frontend(long_speech[None], torch.tensor([num_samples]), plan_of([frames]))
    assert int(feats_lengths[0]) == feats.size(1) == frames
    assert frames == 1 + int(num_samples * policy.fallback_frame_rate_hz / FS_HZ)  # 50 Hz: half the standard frames
    # The sampler's plan reaches the model as the batch key batch_plan.
    loss, stats, _ = model(
        long_speech[None], torch.tensor([num_samples]), text, torch.tensor([60]), batch_plan=plan_of([frames])
    )
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
