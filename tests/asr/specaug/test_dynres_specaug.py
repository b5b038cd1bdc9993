import pytest
import torch

from espnet_dynres.asr.specaug.dynres_specaug import DynResSpecAug

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count


def masked_frames(out: torch.Tensor) -> torch.Tensor:
    """``(B,)`` number of all-zero frames (time-masked) per utterance of ``(B, T, F)``."""
    return (out.abs().sum(-1) == 0).sum(-1)


@pytest.mark.parametrize("seed", range(5))
def test_time_mask_covers_the_same_seconds_at_70_100_130_hz(seed):
    # One 4-second utterance at three frame rates, one mask of a fixed drawn width.
    seconds = []
    for rate in (70.0, 100.0, 130.0):
        t = int(4 * rate)
        x = torch.ones(1, t, 8)
        aug = DynResSpecAug(apply_time_warp=False, apply_freq_mask=False, time_mask_width_range=[10, 40],
                            num_time_mask=1)
        torch.manual_seed(seed)
        out, _ = aug(x, torch.tensor([t]), frame_rate_ratios=torch.tensor([rate / 100.0]))
        seconds.append((masked_frames(out)[0].item(), rate))
    width_std = seconds[1][0]  # frames at 100 Hz
    for frames, rate in seconds:
        assert abs(frames - width_std * rate / 100.0) <= 1.0, seconds
        assert abs(frames / rate - width_std / 100.0) <= 1.0 / rate + 1e-9


def test_per_utterance_rates_in_one_batch():
    rates = torch.tensor([70.0, 100.0, 130.0])
    x = torch.ones(3, 300, 8)
    aug = DynResSpecAug(apply_time_warp=False, apply_freq_mask=False, time_mask_width_range=[30, 30],
                        num_time_mask=1)
    out, _ = aug(x, torch.tensor([300, 300, 300]), frame_rate_ratios=rates / 100.0)
    assert masked_frames(out).tolist() == [21, 30, 39]


def test_tiny_inputs_are_not_an_exception():
    aug = DynResSpecAug(time_warp_window=5, time_mask_width_range=[0, 40], freq_mask_width_range=[0, 4])
    x = torch.randn(2, 3, 8)
    out, lengths = aug(x, torch.tensor([3, 1]), frame_rate_ratios=torch.tensor([1.3, 0.7]))
    assert out.shape == x.shape and lengths.tolist() == [3, 1]
    assert masked_frames(out)[1] <= 1  # a 1-frame utterance: its time mask does not spill into frames 1-2


def test_ratio_masks_and_standard_rate_need_no_rates():
    aug = DynResSpecAug(apply_time_warp=True, time_mask_width_ratio_range=[0.0, 0.1])
    x = torch.randn(2, 50, 8)
    out, _ = aug(x, torch.tensor([50, 40]))
    assert out.shape == x.shape


def test_time_mask_options_are_checked():
    with pytest.raises(ValueError, match="exactly one"):
        DynResSpecAug(time_mask_width_range=[0, 10], time_mask_width_ratio_range=[0, 0.1])
    with pytest.raises(ValueError, match="exactly one"):
        DynResSpecAug()


def test_no_ratios_is_the_standard_rate_and_bad_ratios_are_an_error():
    aug = DynResSpecAug(apply_time_warp=False, apply_freq_mask=False, time_mask_width_range=[30, 30], num_time_mask=1)
    out, _ = aug(torch.ones(2, 300, 8), torch.tensor([300, 300]))
    assert masked_frames(out).tolist() == [30, 30]  # no ratios: the standard rate
    with pytest.raises(ValueError, match=r"must be \(B,\)=\(2,\) positive values, got shape \(3,\)"):
        aug(torch.ones(2, 300, 8), torch.tensor([300, 300]), frame_rate_ratios=torch.tensor([0.7, 1.0, 1.3]))
    with pytest.raises(ValueError, match="positive"):
        aug(torch.ones(2, 300, 8), torch.tensor([300, 300]), frame_rate_ratios=torch.tensor([0.0, 1.0]))
