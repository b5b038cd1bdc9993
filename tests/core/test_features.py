"""The feature functions: reflection at each utterance's own ends (numpy's "reflect" as reference), and
frames past an utterance's length zeroed."""

import numpy as np
import pytest
import torch

from espnet2.layers.log_mel import LogMel
from espnet_dynres.core import features
from factory import pad_batch, real_utterances

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count


@pytest.mark.parametrize("num_samples", [1, 2, 5, 256, 257, 1000, 4000])
def test_reflect_padded_mirrors_each_utterance_at_its_own_ends(num_samples):
    # numpy's "reflect" (repeated for pads longer than the signal) is the reference; the batch
    # holds a longer utterance so the short one is zero-padded as in an ESPnet batch.
    gen = torch.Generator().manual_seed(num_samples)
    short, long = torch.randn(num_samples, generator=gen), torch.randn(5000, generator=gen)
    speech, lengths = pad_batch([short, long])
    padded = features.reflect_padded(speech, lengths, 512)
    assert padded.shape == (2, 5000 + 512)
    for b, w in enumerate((short, long)):
        ref = np.pad(w.numpy(), 256, mode="reflect")
        assert np.array_equal(padded[b, : len(w) + 512].numpy(), ref)


def test_framed_logmel_zeroes_frames_past_each_utterance():
    wavs = [w for c in (1, 2, 3) for w in real_utterances(2, concat=c, start=10 * c)]
    speech, lengths = pad_batch(wavs)
    feats_lengths = 1 + lengths // 160
    shifts = torch.full(lengths.shape, 160.0, dtype=torch.float64)
    window = features.padded_window("hann", 400, 512, speech.device)
    feats = features.framed_logmel(speech, lengths, shifts, feats_lengths, window, LogMel(fs=16000, n_fft=512))
    assert feats.shape[1] == int(feats_lengths.max())
    for b, t in enumerate(feats_lengths.tolist()):
        assert (feats[b, t:] == 0).all() and (feats[b, :t] != 0).any(dim=-1).all()


def test_padded_window_is_centred_in_n_fft_as_torch_stft_pads_it():
    window = features.padded_window("hann", 400, 512, torch.device("cpu"))
    assert window.shape == (512,) and (window[:56] == 0).all() and (window[456:] == 0).all()
    assert torch.equal(window[56:456], torch.hann_window(400))
    assert torch.equal(features.padded_window(None, 4, 8, torch.device("cpu")), torch.tensor([0, 0, 1, 1, 1, 1, 0, 0.]))
