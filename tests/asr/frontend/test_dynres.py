import pytest
import torch

from espnet2.asr.frontend.default import DefaultFrontend
from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.frame_rate_context import current_frame_rates
from factory import pad_batch, real_utterances

METHODS = ["hop", "resample"]


def default_frontend(**kw):
    conf = dict(fs=16000, n_fft=512, win_length=400, hop_length=160, n_mels=80, frontend_conf=None)
    conf.update(kw)
    return DefaultFrontend(**conf)


@pytest.fixture(scope="module")
def real_batch():
    # 6 real utterances of 1-3 spoken digits at 16 kHz (different lengths).
    wavs = [w for c in (1, 2, 3) for w in real_utterances(2, concat=c, start=10 * c)]
    return wavs, *pad_batch(wavs)


@pytest.fixture(scope="module")
def feasible_batch():
    # Real utterances whose durations lie within the 70-130 Hz clamp of each other.
    wavs = real_utterances(5, concat=3, start=100)
    return wavs, *pad_batch(wavs)


@pytest.mark.parametrize("method", METHODS)
def test_eval_mode_equals_default_frontend(real_batch, method):
    _, speech, lengths = real_batch
    ref, ref_lengths = default_frontend().eval()(speech, lengths)
    out, out_lengths = DynResFrontend(method=method).eval()(speech, lengths)
    assert torch.equal(out_lengths, ref_lengths)
    assert (out - ref).abs().max().item() <= 1e-4


@pytest.mark.parametrize("method", METHODS)
def test_no_grad_in_train_mode_is_the_standard_rate(real_batch, method):
    # ESPnet's collect-stats runs the model in train mode under torch.no_grad().
    _, speech, lengths = real_batch
    ref, _ = default_frontend().eval()(speech, lengths)
    with torch.no_grad():
        out, _ = DynResFrontend(method=method).train()(speech, lengths)
    assert (out - ref).abs().max().item() <= 1e-4


def test_hop_at_standard_frame_count_equals_default_frontend_per_utterance(real_batch):
    wavs, _, _ = real_batch
    fe, ref_fe = DynResFrontend(), default_frontend().eval()
    for w in wavs:
        n = torch.tensor([len(w)])
        ref, ref_len = ref_fe(w[None], n)
        out, rates = fe.hop_logmel(w[None], n, ref_len)
        assert out.shape == ref.shape and rates.tolist() == [100.0]
        assert (out - ref).abs().max().item() <= 1e-4


@pytest.mark.parametrize("method", METHODS)
def test_training_batch_has_one_frame_count_and_no_padding(feasible_batch, method):
    _, speech, lengths = feasible_batch
    fe = DynResFrontend(method=method).train()
    t = fe.policy.common_frame_count(lengths.tolist())
    assert t is not None
    feats, feats_lengths = fe(speech, lengths)
    assert feats.shape == (5, t, 80)
    assert feats_lengths.tolist() == [t] * 5
    # no frame is padding: every frame has real (non-zero, finite) log-mel values
    assert torch.isfinite(feats).all()
    assert (feats.abs().sum(-1) > 0).all()
    rates = current_frame_rates().tolist()
    assert all(70 <= r <= 130 for r in rates) and max(rates) - min(rates) > 1.0
    assert not fe.last_batch_fallback


@pytest.mark.parametrize("method", METHODS)
def test_training_batched_equals_one_by_one(method):
    wavs = real_utterances(4, concat=2, start=300)
    speech, lengths = pad_batch(wavs)
    fe = DynResFrontend(method=method).train()
    feats, feats_lengths = fe(speech, lengths)
    compute = fe.hop_logmel if method == "hop" else fe.resample_logmel
    for b, w in enumerate(wavs):
        single, _ = compute(w[None], lengths[b : b + 1], feats_lengths[b : b + 1])
        assert torch.allclose(single[0], feats[b, : feats_lengths[b]], atol=1e-4)


def test_resample_snaps_rates_to_a_grid_and_keeps_exact_frame_counts(feasible_batch):
    _, speech, lengths = feasible_batch
    fe = DynResFrontend(method="resample").train()
    counts, _ = fe.frame_counts(lengths)
    new_rates = [fe.resample_rate_hz(n, t) for n, t in zip(lengths.tolist(), counts.tolist())]
    assert all(r % fe.resample_grid_hz == 0 for r in new_rates)
    assert len(set(new_rates)) > 1
    # The hop correction after snapping is small: actual rates within half a grid step of the ideal.
    fe(speech, lengths)
    actual = current_frame_rates()
    ideal = torch.tensor([fe.policy.frame_rate_hz(n, int(counts[0])) for n in lengths.tolist()])
    step_hz = fe.resample_grid_hz / fe.hop_length
    assert ((actual - ideal).abs() <= step_hz / 2 + 1e-3).all()


@pytest.mark.parametrize("filterbank", ["original", "resampled"])
def test_resample_filterbank_variants_run(feasible_batch, filterbank):
    _, speech, lengths = feasible_batch
    fe = DynResFrontend(method="resample", resample_filterbank=filterbank).train()
    feats, feats_lengths = fe(speech, lengths)
    assert torch.isfinite(feats).all() and len(set(feats_lengths.tolist())) == 1


def test_batch_without_common_frame_count_falls_back_to_standard_rate_with_padding():
    short, long = real_utterances(1, concat=1, start=0)[0], real_utterances(1, concat=8, start=20)[0]
    speech, lengths = pad_batch([short, long])
    fe = DynResFrontend().train()
    assert fe.policy.common_frame_count(lengths.tolist(), min_rate_hz=50.0) is None
    feats, feats_lengths = fe(speech, lengths)
    ref, ref_lengths = default_frontend().eval()(speech, lengths)
    assert torch.equal(feats_lengths, ref_lengths) and fe.last_batch_fallback
    assert fe.num_fallback_batches == 1
    assert (feats - ref).abs().max().item() <= 1e-4
    assert current_frame_rates() is None


def test_rates_between_fallback_and_min_are_used_without_padding():
    one, two = real_utterances(1, concat=2, start=60)[0], real_utterances(1, concat=4, start=70)[0]
    ratio = len(two) / len(one)
    assert 130 / 70 < ratio < 130 / 50, ratio  # beyond the clamp, within the fallback
    speech, lengths = pad_batch([one, two])
    fe = DynResFrontend().train()
    feats, feats_lengths = fe(speech, lengths)
    assert len(set(feats_lengths.tolist())) == 1 and not fe.last_batch_fallback


def test_8k_configuration_gives_100_hz_in_eval_and_one_frame_count_in_training():
    wavs = real_utterances(3, fs_hz=8000, concat=2, start=400)
    speech, lengths = pad_batch(wavs)
    conf = dict(fs="8k", n_fft=256, win_length=200, hop_length=80, n_mels=40)
    fe = DynResFrontend(**conf)
    ref, ref_lengths = default_frontend(**conf).eval()(speech, lengths)
    out, out_lengths = fe.eval()(speech, lengths)
    assert torch.equal(out_lengths, ref_lengths) and (out - ref).abs().max() <= 1e-4
    assert out_lengths.tolist() == [1 + n // 80 for n in lengths.tolist()]  # 100 Hz at 8 kHz
    fe.train()
    feats, feats_lengths = fe(speech, lengths)
    if fe.policy.common_frame_count(lengths.tolist()) is not None:
        assert len(set(feats_lengths.tolist())) == 1


@pytest.mark.parametrize("method", METHODS)
def test_inputs_shorter_than_one_window_do_not_crash(method):
    fe = DynResFrontend(method=method).train()
    speech = torch.randn(3, 300)
    lengths = torch.tensor([300, 100, 1])
    feats, feats_lengths = fe(speech, lengths)
    assert torch.isfinite(feats).all()
    assert feats.shape[0] == 3 and (feats_lengths >= 1).all()


def test_gradients_flow_and_shapes_are_checked():
    fe = DynResFrontend().train()
    with pytest.raises(AssertionError, match=r"\(B, T_samples\)"):
        fe(torch.zeros(2, 100, 1), torch.tensor([100, 100]))
    speech = torch.randn(2, 16000, requires_grad=True)
    feats, _ = fe(speech, torch.tensor([16000, 15000]))
    feats.sum().backward()
    assert speech.grad is not None and torch.isfinite(speech.grad).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(min_frame_rate=70), "min_frame_rate"),
        (dict(method="stretch"), "method"),
        (dict(resample_filterbank="new"), "resample_filterbank"),
        (dict(fallback_frame_rate_hz=80.0), "fallback_frame_rate_hz"),
        (dict(min_frame_rate_hz=140.0), "min_frame_rate_hz"),
    ],
)
def test_bad_frontend_conf_fails_clearly(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        DynResFrontend(**kwargs)
