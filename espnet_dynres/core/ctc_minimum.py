"""Is CTC possible for an utterance?  CTC aligns ``U`` tokens only if the encoder emits at least ``U + R`` frames (``R``
adjacent repeats, which need a blank between).  ESPnet's conv input layers reduce ``T`` feature frames (each layer
``T -> (T - k) // s + 1``, kernel ``k``, stride ``s``; ``espnet.nets.pytorch_backend.transformer.subsampling``) to:

================  ===========================================
input_layer       encoder frames
================  ===========================================
linear, None      ``T``
conv2d1           ``T - 4``            (two k=3, s=1)
conv2d2           ``(T - 1) // 2 - 2`` (k=3 s=2, k=3 s=1)
conv2d            ``((T - 1) // 2 - 1) // 2``
conv2d6           ``((T - 1) // 2 - 2) // 3``
conv2d8           ``(((T - 1) // 2 - 1) // 2 - 1) // 2``
================  ===========================================
"""

from __future__ import annotations

from typing import Optional, Sequence

_LAYERS = {
    None: [],
    "linear": [],
    "conv2d1": [(3, 1), (3, 1)],
    "conv2d2": [(3, 2), (3, 1)],
    "conv2d": [(3, 2), (3, 2)],
    "conv2d6": [(3, 2), (5, 3)],
    "conv2d8": [(3, 2), (3, 2), (3, 2)],
}


def encoder_frames(num_frames: int, input_layer: Optional[str]) -> int:
    """Encoder output frames for ``num_frames`` feature frames (never below 0).

    Raises:
        ValueError: an ``input_layer`` whose subsampling is not known here.
    """
    if input_layer not in _LAYERS:
        raise ValueError(f"unknown encoder input_layer {input_layer!r} for the CTC feasibility check; "
                         f"known: {sorted(k for k in _LAYERS if k)}")
    t = int(num_frames)
    for kernel, stride in _LAYERS[input_layer]:
        t = (t - kernel) // stride + 1 if t >= kernel else 0
    return max(t, 0)


def min_feature_frames(encoder_frames_needed: int, input_layer: Optional[str]) -> int:
    """Fewest feature frames whose encoder output has ``encoder_frames_needed`` frames."""
    t = max(1, int(encoder_frames_needed))
    # encoder_frames is monotone; the answer lies within one stride product of t * product(strides).
    step = 1
    for _, stride in _LAYERS.get(input_layer, []):
        step *= stride
    guess = max(1, t * step - 4 * step)
    while encoder_frames(guess, input_layer) < t:
        guess += 1
    while guess > 1 and encoder_frames(guess - 1, input_layer) >= t:
        guess -= 1
    return guess


def ctc_frames_needed(token_ids: Sequence[int]) -> int:
    """``U + R``: tokens plus adjacent repeats (each repeat needs a blank between)."""
    repeats = sum(1 for a, b in zip(token_ids, token_ids[1:]) if a == b)
    return len(token_ids) + repeats
