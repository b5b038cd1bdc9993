"""The float32 tolerances of float_tolerance.py: they accept rounding (float32 against a float64
reference, batched against one by one, sums in another order) and reject real differences (a frame
shifted by one, another rate, padding read as signal, 1 % of a band's power)."""

import math

import pytest
import torch
import torchaudio

from espnet2.asr.frontend.default import DefaultFrontend
from espnet2.layers.log_mel import LogMel
from espnet_dynres.asr.frontend.dynres import DynResFrontend
from factory import RECIPE_FRONTEND, pad_batch, real_utterances
from float_tolerance import (FLOAT32_U, SAFETY, assert_close_float32, assert_logmel_close, conv_reduction_length,
                             float32_allowance, gamma, logmel_excess)

N_FFT, WIN, HOP = RECIPE_FRONTEND["n_fft"], RECIPE_FRONTEND["win_length"], RECIPE_FRONTEND["hop_length"]

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count


@pytest.fixture(scope="module")
def wavs():
    # Real utterances of 1-3 spoken digits at 16 kHz, as the frontend tests use.
    return [w for c in (1, 2, 3) for w in real_utterances(2, concat=c, start=10 * c)]


def float64_logmel(wav: torch.Tensor, logmel: LogMel) -> torch.Tensor:
    """The recipe's log-mel of one utterance in float64 (torch.stft + the same filterbank): ``(T, n_mels)``."""
    window = torch.hann_window(WIN, dtype=torch.float64)
    spec = torch.stft(wav.double(), N_FFT, HOP, WIN, window, center=True, pad_mode="reflect", return_complex=True)
    power = spec.abs().T ** 2  # (T, F)
    return (power @ logmel.melmat.double()).clamp(min=1e-10).log()


def test_gamma_is_highams_bound():
    assert FLOAT32_U == 2.0 ** -24 and gamma(0) == 0.0
    assert gamma(1) == pytest.approx(FLOAT32_U, rel=1e-6)
    assert gamma(512) == pytest.approx(512 * FLOAT32_U / (1 - 512 * FLOAT32_U))
    assert gamma(3) + gamma(5) <= gamma(8) and 3 * gamma(5) <= gamma(15)  # Higham Lemma 3.3
    assert float32_allowance(2.0, reduction_length=3) == SAFETY * gamma(3) * 2.0
    with pytest.raises(ValueError):
        gamma(2 ** 24)


def test_sums_in_any_order_are_within_the_bound_and_a_real_change_is_not():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=gen) * torch.rand(4096, generator=gen).pow(8) * 1e3
    exact = x.double().sum()
    scale = float(x.double().abs().sum())
    for perm in (torch.arange(len(x)), torch.randperm(len(x), generator=gen)):
        xs = x[perm]
        float32_sums = [xs.sum(), xs.view(64, 64).sum(0).sum(), xs.view(512, 8).sum(1).sum(), xs.cumsum(0)[-1]]
        for s in float32_sums:
            assert_close_float32(s, exact, reduction_length=len(x), scale=scale)
    a, b = torch.randn(64, 300, generator=gen), torch.randn(300, 32, generator=gen)
    for got in (a @ b, torch.cat([a[:1] @ b, a[1:] @ b]), (a.T.contiguous().T @ b)):
        assert_close_float32(got, a.double() @ b.double(), reduction_length=300,
                             scale=a.double().abs() @ b.double().abs())
    with pytest.raises(AssertionError, match="not equal up to float32 rounding"):
        assert_close_float32(exact + 1e-2 * scale, exact, reduction_length=len(x), scale=scale)
    with pytest.raises(AssertionError, match="shapes differ"):
        assert_close_float32(torch.zeros(2), torch.zeros(3), reduction_length=1)
    assert_close_float32(torch.tensor([math.inf, 1.0]), torch.tensor([math.inf, 1.0]), reduction_length=1)


def test_the_logmel_bounds_premise_holds_on_the_recordings(wavs):
    # Each frame's spectral energy lies between the filterbank's first and last band centres:
    # ||X_full||^2 <= 2 sum_j M_j / h_j (float64, every frame of every utterance).
    melmat = LogMel(fs=16000, n_fft=N_FFT, n_mels=80).melmat.double()
    window = torch.hann_window(WIN, dtype=torch.float64)
    for w in wavs + real_utterances(20, start=500):
        spec = torch.stft(w.double(), N_FFT, HOP, WIN, window, center=True, pad_mode="reflect", return_complex=True)
        power = spec.abs().T ** 2  # (T, F)
        full = 2 * power.sum(-1) - power[:, 0] - power[:, -1]
        seen = ((power @ melmat).clamp(min=1e-10) / melmat.max(0).values).sum(-1)
        assert (full <= 2 * seen).all(), float((full / (2 * seen)).max())


def test_float32_logmel_is_within_the_bound_of_the_float64_one(wavs):
    fe = DynResFrontend(**RECIPE_FRONTEND).eval()  # ESPnet's Stft + LogMel in float32
    worst = 0.0
    for w in wavs:
        ref = float64_logmel(w, fe.logmel)
        got = fe(w[None], torch.tensor([len(w)]))[0][0]
        assert_logmel_close(got, ref, melmat=fe.logmel.melmat)
        worst = max(worst, float((got.double() - ref).abs().max()))
    assert worst > 1e-4  # the log-domain difference an absolute tolerance would have had to allow


def test_resampled_float32_logmel_is_within_the_bound_with_the_resamplers_taps(wavs):
    fe = DynResFrontend(**RECIPE_FRONTEND).eval()
    for fs_new in (11200, 20800):
        resampler = torchaudio.transforms.Resample(16000, fs_new, resampling_method="sinc_interp_hann")
        resampler64 = torchaudio.transforms.Resample(16000, fs_new, resampling_method="sinc_interp_hann").double()
        upstream = conv_reduction_length(resampler.kernel)
        assert upstream >= resampler.kernel.shape[-1]
        for w in wavs[::2]:
            x = resampler(w)
            got, _ = fe(x[None], torch.tensor([len(x)]))
            ref = float64_logmel(resampler64(w.double()), fe.logmel)
            assert_logmel_close(got[0], ref, melmat=fe.logmel.melmat, upstream_length=upstream)


def test_logmel_bound_rejects_a_shifted_frame_another_rate_padding_and_one_percent_of_a_band(wavs):
    fe = DynResFrontend(**RECIPE_FRONTEND).eval()
    melmat = fe.logmel.melmat
    w = wavs[2]
    feats, _ = fe(w[None], torch.tensor([len(w)]))
    feats = feats[0]
    assert_logmel_close(feats, feats.clone(), melmat=melmat)
    # a frame shift by one frame (10 ms), and by one sample
    with pytest.raises(AssertionError, match="not equal up to float32 rounding"):
        assert_logmel_close(feats[1:], feats[:-1], melmat=melmat)
    shifted, _ = fe(w[None, 1:], torch.tensor([len(w) - 1]))
    assert logmel_excess(shifted[0, 1:-1], feats[1:shifted.size(1) - 1], melmat=melmat).max() > 10
    # another rate: frames 2 % further apart
    other = DynResFrontend(**{**RECIPE_FRONTEND, "hop_length": 157}).eval()
    faster, _ = other(w[None], torch.tensor([len(w)]))
    t = min(faster.size(1), feats.size(1))
    assert logmel_excess(faster[0, :t], feats[:t], melmat=melmat).max() > 10
    # padding read as signal: DefaultFrontend reflects at the end of the padded batch, not of the utterance
    speech, lengths = pad_batch([w, wavs[5]])
    padded, _ = DefaultFrontend(fs=16000, frontend_conf=None, **RECIPE_FRONTEND).eval()(speech, lengths)
    assert logmel_excess(padded[0, : feats.size(0)], feats, melmat=melmat)[-2:].max() > 10
    # 1 % more power in the band holding the largest share of its frame's energy (sum_j M_j / h_j, the
    # energy the bound is relative to), in every frame where that share is at least 5 %
    energy = feats.double().exp() / melmat.double().max(0).values  # (T, n_mels): M_j / h_j
    share, band = (energy / energy.sum(-1, keepdim=True)).max(-1)
    frames = (share >= 0.05).nonzero().flatten().tolist()
    assert len(frames) > len(feats) // 2
    for t in frames:
        changed = feats.clone()
        changed[t, band[t]] += math.log(1.01)
        with pytest.raises(AssertionError, match="not equal up to float32 rounding"):
            assert_logmel_close(changed, feats, melmat=melmat)
