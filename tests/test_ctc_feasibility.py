import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from espnet.nets.pytorch_backend.transformer.subsampling import (
    Conv2dSubsampling,
    Conv2dSubsampling2,
    Conv2dSubsampling6,
    Conv2dSubsampling8,
)
from espnet_dynres.core.ctc_minimum import ctc_frames_needed, encoder_frames, min_feature_frames

LAYERS = {"conv2d": Conv2dSubsampling, "conv2d2": Conv2dSubsampling2, "conv2d6": Conv2dSubsampling6,
          "conv2d8": Conv2dSubsampling8}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_encoder_frames_match_espnet_subsampling(name):
    layer = LAYERS[name](40, 4, 0.0)
    for t in (15, 16, 17, 31, 32, 33, 100, 257):
        out, _ = layer(torch.zeros(1, t, 40), None)
        assert out.shape[1] == encoder_frames(t, name), (name, t)


@given(st.integers(min_value=1, max_value=500), st.sampled_from(["conv2d", "conv2d2", "conv2d6", "conv2d8", "linear"]))
def test_min_feature_frames_is_the_smallest_sufficient_input(needed, name):
    t = min_feature_frames(needed, name)
    assert encoder_frames(t, name) >= needed
    assert t == 1 or encoder_frames(t - 1, name) < needed


def test_repeats_need_a_blank_between():
    assert ctc_frames_needed([3, 3, 4]) == 4
    assert ctc_frames_needed([1, 2, 3]) == 3
    assert ctc_frames_needed([]) == 0


def test_unknown_input_layer_is_named():
    with pytest.raises(ValueError, match="conv9"):
        encoder_frames(100, "conv9")
