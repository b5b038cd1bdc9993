"""The dynres frontend under mixed precision: features stay float32 and equal to a float32 run.

CPU autocast stands in for CUDA's (same ``torch.autocast`` mechanism; bf16 and fp16).
Without the frontend's autocast-off float32 forward the mel matmul and the resampling convolution run in
bf16 here and the features differ by up to ~0.07 (hop) and ~10 (resample).
"""

import pytest
import torch

from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from factory import RECIPE_FRONTEND, pad_batch, real_utterances, common_frame_count

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

# The frontend runs with autocast off, so under autocast it runs the same float32 operations on the
# same shapes as without it: the features are bit-identical (torch.equal), not merely close.


@pytest.fixture(scope="module")
def batch():
    """Real FSDD utterances (3 digits each, 16 kHz) that share a frame count inside 70-130 Hz."""
    wavs = sorted(real_utterances(6, concat=3, start=30), key=len)
    policy = FrameRatePolicy(fs=16000, hop_length=160)
    assert common_frame_count(policy, [len(w) for w in wavs]) is not None
    return pad_batch(wavs)


@pytest.mark.parametrize("method", ["hop", "resample"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("training", [True, False])
def test_features_under_autocast_equal_float32(batch, method, dtype, training):
    speech, lengths = batch
    frontend = DynResFrontend(method=method, **RECIPE_FRONTEND).train(training)
    ref, ref_lengths = frontend(speech, lengths)
    with torch.autocast("cpu", dtype=dtype):
        out, out_lengths, _, fallback = frontend.features(speech, lengths)
    assert out.dtype == torch.float32
    assert torch.equal(out_lengths, ref_lengths)
    if training:
        assert not fallback and bool((out_lengths == out.size(1)).all())
    assert torch.equal(out, ref)


def test_half_precision_speech_gives_float32_features(batch):
    """Speech handed over in float16 (e.g. a half-precision loader) is analysed in float32."""
    speech, lengths = batch
    frontend = DynResFrontend(**RECIPE_FRONTEND).train()
    out, _ = frontend(speech.half(), lengths)
    ref, _ = frontend(speech.half().float(), lengths)
    assert out.dtype == torch.float32
    assert torch.equal(out, ref)  # float16 -> float32 is exact: the same float32 input


def test_autocast_is_restored_after_forward(batch):
    speech, lengths = batch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        DynResFrontend(**RECIPE_FRONTEND).train()(speech, lengths)
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
