"""Tolerances for float32 results that are equal only up to rounding, derived from float32 arithmetic.

Two computations of one quantity agree bit for bit only when they run the same operations on the same
shapes with the same thread count (a function called twice, our code calling ESPnet's own modules).
Otherwise (batched vs one by one, padded vs unpadded, another kernel, another thread count or vector
width, a float64 reference) a float32 result is fixed only to within its rounding errors, and those
are bounded relative to the magnitude of the terms summed, not to the result.  The bounds here are the
standard ones (N. J. Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM 2002):

* §2.2: each float32 operation rounds with relative error at most ``u = 2**-24``.
* §3.1 (Lemma 3.1, the dot-product bound) and §4.2 (summation): a sum of ``n`` terms (a dot product, a
  matmul entry, a DFT bin, a convolution's taps) computed in ANY order errs by at most
  ``gamma(n) * sum |terms|``, ``gamma(n) = n u / (1 - n u)``; so reordering (blocking, vectorising,
  threading) needs no extra factor.
* §3.4 (Lemma 3.3): ``gamma(a) + gamma(b) <= gamma(a + b)`` and ``j * gamma(n) <= gamma(j n)``: the bounds
  of consecutive stages add up to one ``gamma`` of the summed lengths.
* §24.1 (Theorem 24.2): an FFT errs by ``O(log2(N) u) * ||x||_2`` only; ``gamma(N) * ||x||_1``, the
  bound for any order of the ``N`` products of a DFT bin, covers every DFT algorithm with room.

Use :func:`assert_close_float32` for sums, matmuls and statistics, :func:`assert_logmel_close` for
log-mel features, and exact comparisons (``torch.equal``) wherever the two sides run the same operations
on the same shapes.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

# Unit roundoff of IEEE binary32 (Higham §2.1, Table 2.1): every float32 operation's relative error.
FLOAT32_U = 2.0 ** -24

# The gamma bounds hold for any summation order, so no factor is needed for reordering itself; this
# covers the small constants the stage-by-stage derivations below round off: complex arithmetic (a
# factor up to sqrt(2), Higham §3.6), twiddle factors and filter weights that are themselves rounded, a
# window that varies over a resampling filter's taps, and the single roundings between stages.
SAFETY = 4.0

# ESPnet LogMel's floor on mel power (``torch.clamp(mel, min=1e-10)``) and its natural log, the most
# negative log-mel value: float32 stores a log value with an absolute error up to u * |value|.
LOGMEL_FLOOR = 1e-10


def gamma(n: int, u: float = FLOAT32_U) -> float:
    """``n u / (1 - n u)``: the relative error bound of ``n`` roundings in a row (Higham Lemma 3.1).

    Raises:
        ValueError: ``n u >= 1`` (no bound) or ``n < 0``.
    """
    if n < 0 or n * u >= 1:
        raise ValueError(f"gamma({n}) is not defined for u={u:g} (needs 0 <= n u < 1)")
    return n * u / (1 - n * u)


def float32_allowance(scale, *, reduction_length: int = 1):
    """``SAFETY * gamma(reduction_length) * scale``: what float32 rounding may add to a value of
    magnitude ``scale`` (a float or a tensor), e.g. beside a modelling tolerance."""
    return SAFETY * gamma(reduction_length) * scale


def _as_float64(x) -> torch.Tensor:
    return torch.as_tensor(x).detach().to(torch.float64)


def assert_close_float32(actual, expected, *, reduction_length: int, scale=0.0, msg: Optional[str] = None) -> None:
    """``|actual - expected| <= SAFETY * gamma(reduction_length) * (scale + |expected|)`` elementwise.

    The float32 error of a sum of ``n`` terms is at most ``gamma(n) * sum |terms|`` (Higham §4.2);
    ``scale`` is that magnitude of the terms summed (``sum |x|``, or ``max |x| * n``; a float or a tensor
    broadcast against ``expected``) and ``reduction_length`` the number of roundings in a row on the
    longest path (the summed lengths of consecutive reductions, Higham Lemma 3.3).  The ``|expected|``
    term is the relative part (sums of terms of one sign, elementwise operations); ``scale = 0`` leaves
    only it.

    Args:
        actual, expected: tensors, arrays or numbers of one shape (compared in float64).
        reduction_length: roundings in a row on the longest path from the common inputs.
        scale: the magnitude of the summed terms, absolute (same units as the values).
        msg: prefixed to the failure message.

    Raises:
        AssertionError: shapes differ, or an element lies outside the bound (the worst one is named).
    """
    a, e = _as_float64(actual), _as_float64(expected)
    assert a.shape == e.shape, f"{msg + ': ' if msg else ''}shapes differ: {tuple(a.shape)} vs {tuple(e.shape)}"
    k = SAFETY * gamma(reduction_length)
    bound = k * (_as_float64(scale) + e.abs())
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))  # equal infinities and NaNs agree
    excess = torch.where(same, torch.zeros_like(a), (a - e).abs() / bound)
    excess = torch.nan_to_num(excess, nan=math.inf)
    if excess.numel() and float(excess.max()) > 1:
        i = int(excess.argmax())
        idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), a.shape)) if a.dim() else ()
        raise AssertionError(
            f"{msg + ': ' if msg else ''}not equal up to float32 rounding: {int((excess > 1).sum())} of "
            f"{a.numel()} elements; worst at {idx}: {float(a.reshape(-1)[i]):.9g} vs {float(e.reshape(-1)[i]):.9g}, "
            f"|difference| {float((a - e).abs().reshape(-1)[i]):.3g} > bound "
            f"{float(bound.expand_as(a).reshape(-1)[i]):.3g} "
            f"(SAFETY {SAFETY:g} x gamma({reduction_length}) = {k:.3g} x (scale + |expected|))"
        )


def conv_reduction_length(kernel: torch.Tensor) -> int:
    """Roundings one output sample of a convolution with ``kernel`` adds, counted against its input:
    ``K * ceil(max over output phases of sum |h|)`` for ``kernel`` ``(phases, 1, K)`` (or ``(K,)``).

    A ``K``-tap sum errs by ``gamma(K) * sum |h_i x_i| <= gamma(K) * ||h||_1 * max |x|`` (Higham §4.2),
    and ``gamma(K) * ceil(||h||_1) <= gamma(K * ceil(||h||_1))`` (Lemma 3.3).  For
    ``torchaudio.transforms.Resample``: ``conv_reduction_length(resampler.kernel)``.
    """
    k = kernel.detach().to(torch.float64).reshape(-1, kernel.shape[-1])
    return int(kernel.shape[-1]) * math.ceil(float(k.abs().sum(-1).max()))


FilterBanks = Union[torch.Tensor, Sequence[torch.Tensor]]


def logmel_excess(actual: torch.Tensor, expected: torch.Tensor, *, melmat: FilterBanks,
                  upstream_length: int = 0) -> torch.Tensor:
    """``|m_actual - m_expected| / bound`` per element for log-mel features (``<= 1``: equal up to
    float32 rounding); see :func:`assert_logmel_close` for the bound.

    Args:
        actual, expected: ``(..., T, n_mels)`` natural-log mel power (ESPnet's ``LogMel``).
        melmat: the ``(F, n_mels)`` filterbank (ESPnet ``LogMel.melmat``), or several (one per rate, all
            ``(F, n_mels)``) when different rows came from different filterbanks.
        upstream_length: roundings before the analysis window, counted against the input
            (:func:`conv_reduction_length` of a resampler); 0 for speech framed as it is.

    Returns:
        float64 tensor of ``actual``'s shape.
    """
    a, e = _as_float64(actual), _as_float64(expected)
    assert a.shape == e.shape, f"log-mel shapes differ: {tuple(a.shape)} vs {tuple(e.shape)}"
    banks = [melmat] if isinstance(melmat, torch.Tensor) else list(melmat)
    w = torch.stack([_as_float64(m) for m in banks])  # (K, F, n_mels)
    assert w.size(-1) == a.size(-1), f"filterbank has {w.size(-1)} bands, features {a.size(-1)}"
    n_fft = 2 * (w.size(1) - 1)
    # Per band j: h_j its peak weight, r_j its row sum; worst over the filterbanks.
    peak = w.max(dim=1).values  # (K, n_mels)
    h = torch.where(peak > 0, peak, torch.full_like(peak, math.inf)).min(dim=0).values  # (n_mels,), inf: empty
    r = w.sum(dim=1).max(dim=0).values  # (n_mels,)
    m_a, m_e = (a / 2).exp(), (e / 2).exp()  # sqrt of mel power: a weighted 2-norm of the spectrum
    # The frame's spectral energy seen through the filterbank: sum_j M_j / h_j equals sum_k |X_k|^2 over
    # the bins between the first and the last band's centre (the triangles, each divided by its peak,
    # sum to >= 1 there); premise: a frame's energy lies there (speech band-limited within the filterbank;
    # tests/test_float_tolerance.py checks it on the recordings the tests use).
    frame_energy = torch.maximum((m_a ** 2 / h).sum(-1), (m_e ** 2 / h).sum(-1))  # (..., T)
    # DFT bin k: |dX_k| <= gamma(N + upstream) * ||x_w||_1 <= ... * sqrt(N) ||x_w||_2 = ... * ||X_full||_2,
    # and ||X_full||^2 <= 2 * frame_energy (one-sided spectrum).  Band j: m_j = ||sqrt(W_j) X||_2, so
    # |dm_j| <= ||sqrt(W_j) dX||_2 <= sqrt(r_j) * max_k |dX_k|.
    frame_part = gamma(n_fft + upstream_length) * (2 * r * frame_energy[..., None]).sqrt()
    # Band-relative roundings: power (2), the mel sum of F non-negative terms, the stored log value
    # (|d log| <= u |log M|; the clamp is 1-Lipschitz).
    log_terms = math.ceil(max(abs(math.log(LOGMEL_FLOOR)), float(a.abs().max()) if a.numel() else 0.0,
                              float(e.abs().max()) if e.numel() else 0.0))
    band_part = gamma(w.size(1) + 2 + log_terms) * torch.maximum(m_a, m_e)
    bound = SAFETY * (frame_part + band_part)
    diff = (m_a - m_e).abs()
    return torch.where(diff == 0, torch.zeros_like(diff), diff / bound)


def assert_logmel_close(actual: torch.Tensor, expected: torch.Tensor, *, melmat: FilterBanks,
                        upstream_length: int = 0, msg: Optional[str] = None) -> None:
    """Log-mel features equal up to float32 rounding, compared in the magnitude domain per frame.

    ``m = exp(logmel / 2)`` (the square root of mel power) must satisfy, for frame ``t`` and band ``j``::

        |m_actual - m_expected| <= SAFETY * (gamma(n_fft + upstream_length) * sqrt(2 r_j E_t)
                                             + gamma(F + 2 + ceil(max |logmel|)) * m)

    with ``r_j`` band ``j``'s filterbank row sum, ``E_t = sum_j M_tj / h_j`` the frame's spectral energy
    (``h_j`` the band's peak weight) and ``F = n_fft / 2 + 1``.  Why: the DFT's rounding errors (and any
    upstream sum's, e.g. a resampling filter) are relative to the FRAME's energy (Higham §4.2: ``gamma(N)
    * ||x||_1`` per bin), not to a band's; a band far below its frame (a log-mel of -23, near LogMel's
    1e-10 floor) is fixed only to within that, so no absolute log-domain tolerance can hold for it.  A real
    bug (a frame shifted, another rate, padding read as signal, a band off by 1 % of its power when it
    holds a few percent of its frame's energy) changes ``m`` by far more.

    Args:
        actual, expected: ``(T, n_mels)`` or ``(B, T, n_mels)`` float log-mel; padded frames (0 in both)
            compare equal.
        melmat, upstream_length: see :func:`logmel_excess`.
        msg: prefixed to the failure message.

    Raises:
        AssertionError: shapes differ, or an element lies outside the bound (the worst one is named).
    """
    excess = logmel_excess(actual, expected, melmat=melmat, upstream_length=upstream_length)
    if excess.numel() and not float(excess.max()) <= 1:
        i = int(torch.nan_to_num(excess, nan=math.inf).argmax())
        idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), excess.shape))
        a, e = actual.reshape(-1)[i], expected.reshape(-1)[i]
        raise AssertionError(
            f"{msg + ': ' if msg else ''}log-mel features not equal up to float32 rounding: "
            f"{int((excess > 1).sum())} of {excess.numel()} elements; worst at {idx}: {float(a):.6g} vs "
            f"{float(e):.6g}, |dm| = {float(excess.reshape(-1)[i]):.3g} x the bound"
        )
