"""The token-normalized loss under mixed precision: float32, finite, close to a float32 run.

CPU autocast (bf16, fp16) stands in for CUDA's.  The large-token case (N = 26,624 target
tokens, many short utterances to keep CTC cheap on CPU) sums more cross-entropy than float16 can hold (max 65,504), so a loss summed in
float16 would be inf there.
"""

import pytest
import torch

from factory import build_tiny_model, pad_batch, random_text, real_utterances

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

LARGE_BATCH = 2048
LARGE_TOKENS = 13  # per utterance: N = 26,624


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(seed=0).train()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_losses_with_many_tokens_are_float32_and_finite(model, dtype):
    g = torch.Generator().manual_seed(0)
    text = torch.randint(2, 12, (LARGE_BATCH, LARGE_TOKENS), generator=g)
    text_lengths = torch.full((LARGE_BATCH,), LARGE_TOKENS)
    enc_frames = 3 * LARGE_TOKENS  # enough for CTC (tokens + repeats)
    encoder_out = 3 * torch.randn(LARGE_BATCH, enc_frames, 16, generator=g)  # (B, T_enc, D)
    encoder_out_lens = torch.full((LARGE_BATCH,), enc_frames)
    results = {}
    for amp in (None, dtype):
        torch.manual_seed(0)  # same dropout masks in both runs
        with torch.autocast("cpu", dtype=dtype, enabled=amp is not None):
            loss_ctc, _ = model._calc_ctc_loss(encoder_out, encoder_out_lens, text, text_lengths)
            loss_att, *_ = model._calc_att_loss(encoder_out, encoder_out_lens, text, text_lengths)
        results[amp] = (loss_ctc, loss_att)
    # The premise: the summed attention loss (per-token mean x N) is beyond float16's range.
    n_tokens = float(text_lengths.sum())
    assert float(results[None][1].detach()) * n_tokens > torch.finfo(torch.float16).max
    for ref, out in zip(results[None], results[dtype]):
        assert out.dtype == torch.float32
        assert torch.isfinite(out).all()
        # Per-token losses are O(1): a float16 sum of 26,624 of them would overflow.
        torch.testing.assert_close(out, ref, rtol=1e-2, atol=0)


def test_full_forward_under_bf16_autocast_close_to_float32(model):
    wavs = real_utterances(6, concat=3, start=30)
    speech, speech_lengths = pad_batch(wavs)
    text, text_lengths = random_text(6, 8, seed=3)
    torch.manual_seed(0)
    loss_ref, stats_ref, weight_ref = model(speech, speech_lengths, text, text_lengths)
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, stats, weight = model(speech, speech_lengths, text, text_lengths)
    assert loss.dtype == torch.float32 and torch.isfinite(loss).all()
    # The encoder and decoder run in bf16 (8-bit mantissa): 2 % on the per-token loss.
    torch.testing.assert_close(loss, loss_ref, rtol=2e-2, atol=0)
    assert torch.equal(weight, weight_ref)  # N, a count
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
