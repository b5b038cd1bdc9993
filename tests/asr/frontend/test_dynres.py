import numpy as np
import pytest
import torch

from espnet2.asr.frontend.default import DefaultFrontend
from espnet_dynres.asr.frontend.dynres import DynResFrontend
from espnet_dynres.core import features
from factory import RECIPE_FRONTEND, pad_batch, plan_of, real_utterances, common_frame_count, frame_range, frame_rate, frame_shift
from float_tolerance import assert_close_float32, assert_logmel_close, conv_reduction_length, float32_allowance

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

METHODS = ["hop", "resample"]

# Comparisons: where our code runs ESPnet's own Stft and LogMel on the same batch (every eval-mode
# path without eval_frame_rate_hz) the features are bit-identical (torch.equal); where it runs other
# operations or other shapes (its own framing, a batch against one utterance, a resampled batch
# against one row) they are equal up to float32 rounding, which float_tolerance.assert_logmel_close
# bounds per frame (rounding errors are relative to a frame's energy, not to a band's).


def logmel_bound(fe, lengths, feats_lengths):
    """``assert_logmel_close``'s filterbanks and upstream roundings for ``fe``'s training features of
    utterances of ``lengths`` samples at ``feats_lengths`` frames."""
    if fe.method == "hop":
        return dict(melmat=fe.logmel.melmat)
    cpu = torch.device("cpu")
    rates = sorted(set(features.resample_rates_hz(fe.policy, lengths, feats_lengths, fe.resample_grid_hz).tolist()))
    upstream = max([conv_reduction_length(fe.resampler(r, cpu).kernel) for r in rates if r != fe.fs], default=0)
    melmat = fe.logmel.melmat if fe.resample_filterbank == "original" else [fe._logmel_at(r, cpu).melmat for r in rates]
    return dict(melmat=melmat, upstream_length=upstream)


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
    out, out_lengths = DynResFrontend(method=method, **RECIPE_FRONTEND).eval()(speech, lengths)
    assert torch.equal(out_lengths, ref_lengths)
    assert torch.equal(out, ref)  # ESPnet's Stft + LogMel on the same batch


@pytest.mark.parametrize("method", METHODS)
def test_no_grad_in_train_mode_is_the_standard_rate(real_batch, method):
    # ESPnet's collect-stats runs the model in train mode under torch.no_grad().
    _, speech, lengths = real_batch
    ref, _ = default_frontend().eval()(speech, lengths)
    with torch.no_grad():
        out, _ = DynResFrontend(method=method, **RECIPE_FRONTEND).train()(speech, lengths)
    assert torch.equal(out, ref)  # the eval path: ESPnet's Stft + LogMel on the same batch


def test_hop_at_standard_frame_count_equals_default_frontend_per_utterance(real_batch):
    wavs, _, _ = real_batch
    fe, ref_fe = DynResFrontend(**RECIPE_FRONTEND), default_frontend().eval()
    for w in wavs:
        n = torch.tensor([len(w)])
        ref, ref_len = ref_fe(w[None], n)
        out, rates = fe.dynamic_logmel(w[None], n, ref_len)
        assert out.shape == ref.shape and rates.tolist() == [100.0]
        assert_logmel_close(out[0], ref[0], melmat=fe.logmel.melmat)  # our framing vs torch.stft


def gradient_terms(fe, w, weights):
    """Per sample, the magnitude of the terms float32 sums into d(sum weights * mel power)/d(speech),
    fe's framing at its standard hop reflected at the ends of ``w`` (longer than n_fft / 2).

    Frame t adds, through the window and the adjoint DFT, terms of at most window * A_t with
    A_t = 4 ||x_w,t||_1 sum_j weights_tj r_j: |X_tk| <= ||x_w,t||_1, d/dpower_k = sum_j W_kj weights_tj,
    r_j the filterbank's row sums. The forward DFT's own error, |dX_tk| <= gamma(n_fft) ||x_w,t||_1,
    enters through the same A_t."""
    n_fft, half, length = fe.n_fft, fe.n_fft // 2, len(w)
    window = features.padded_window(fe.window, fe.win_length, n_fft, torch.device("cpu")).double()
    pos = torch.arange(weights.size(0))[:, None] * fe.hop_length - half + torch.arange(n_fft)  # (T, n_fft)
    src = torch.where(pos < 0, -pos, torch.where(pos >= length, 2 * (length - 1) - pos, pos))  # reflect
    l1 = (window * w.double()[src]).abs().sum(-1)  # (T,) ||x_w,t||_1
    frame_terms = 4 * l1 * (weights.double() @ fe.logmel.melmat.double().sum(0))  # (T,) A_t
    terms = (window * frame_terms[:, None]).flatten()
    return torch.zeros(length, dtype=torch.float64).index_add_(0, src.flatten(), terms)


def test_hop_gradient_at_standard_frame_count_equals_default_frontend(real_batch):
    # The fast framing (reflect-pad at each utterance's ends, strided gather) must back-propagate
    # to the waveform as torch.stft does, up to float32 rounding. The loss weights mel power (the
    # features' exp): through the log a band's gradient scales with 1 / its power, and float32 fixes a
    # near-silent band's power only to within rounding of its frame's energy, so log-domain gradients of
    # such bands are not determined by float32 arithmetic; power-domain ones are (gradient_terms).
    wavs, _, _ = real_batch
    fe, ref_fe = DynResFrontend(**RECIPE_FRONTEND), default_frontend()
    # forward DFT, adjoint DFT (n_fft terms with the one-sided spectrum's doubling), the mel adjoint,
    # the frames overlapping a sample (twice at a reflected end), exp / log / power / window
    reduction_length = 2 * fe.n_fft + fe.n_mels + 2 * (fe.n_fft // fe.hop_length + 1) + 8
    for w in wavs[::2]:
        x_ref, x = w[None].clone().requires_grad_(True), w[None].clone().requires_grad_(True)
        n = torch.tensor([len(w)])
        ref, ref_len = ref_fe(x_ref, n)
        out, _ = fe.dynamic_logmel(x, n, ref_len)
        weights = torch.rand(ref.shape, generator=torch.Generator().manual_seed(len(w)))
        (ref.exp() * weights).sum().backward()
        (out.exp() * weights).sum().backward()
        assert x_ref.grad.abs().max() > 0
        assert_close_float32(x.grad[0], x_ref.grad[0], reduction_length=reduction_length,
                             scale=gradient_terms(fe, w, weights[0]))


@pytest.mark.parametrize("fs_hz", [None, [11200, 16000, 20800]])
def test_batched_frame_shifts_are_bit_identical_to_the_policy(fs_hz):
    fe = DynResFrontend(**RECIPE_FRONTEND)
    gen = torch.Generator().manual_seed(0)
    num_samples = torch.cat([torch.tensor([0, 1, 159, 160, 161, 257]), torch.randint(1, 600_000, (3000,), generator=gen)])
    standard = 1 + num_samples // 160
    # frame counts from far below to far above the clamp, and 1
    scale = 0.2 + 1.6 * torch.rand(num_samples.shape, generator=gen, dtype=torch.float64)
    num_frames = (standard * scale).long().clamp(min=1)
    num_frames[:3] = 1
    rates = None if fs_hz is None else torch.tensor(fs_hz)[torch.arange(len(num_samples)) % 3]
    shifts = fe.policy.frame_shifts_samples(num_samples, num_frames, fs_hz=rates)
    ref = [
        frame_shift(fe.policy, n, t, fs_hz=None if rates is None else int(rates[i]))
        for i, (n, t) in enumerate(zip(num_samples.tolist(), num_frames.tolist()))
    ]
    assert shifts.dtype == torch.float64 and shifts.tolist() == ref
    nonempty = num_samples > 0
    assert torch.equal((1 + torch.floor(num_samples / shifts))[nonempty].long(), num_frames[nonempty])
    with pytest.raises(ValueError, match="num_frames"):
        fe.policy.frame_shifts_samples(torch.tensor([1600]), torch.tensor([0]))


@pytest.mark.parametrize("method", METHODS)
def test_training_batch_has_one_frame_count_and_no_padding(feasible_batch, method):
    _, speech, lengths = feasible_batch
    fe = DynResFrontend(method=method, **RECIPE_FRONTEND).train()
    t = common_frame_count(fe.policy, lengths.tolist())
    assert t is not None
    out = fe.features(speech, lengths)
    feats, feats_lengths = out.feats, out.feats_lengths
    assert feats.shape == (5, t, 80)
    assert feats_lengths.tolist() == [t] * 5
    # no frame is padding: every frame has real (non-zero, finite) log-mel values
    assert torch.isfinite(feats).all()
    assert (feats.abs().sum(-1) > 0).all()
    rates = out.frame_rates_hz.tolist()
    assert all(70 <= r <= 130 for r in rates) and max(rates) - min(rates) > 1.0
    assert not out.fallback
    # forward is the AbsFrontend view of the same computation
    forward_feats, forward_lengths = fe(speech, lengths)
    assert torch.equal(forward_feats, feats) and torch.equal(forward_lengths, feats_lengths)


@pytest.mark.parametrize("method", METHODS)
def test_training_batched_equals_one_by_one(method):
    wavs = real_utterances(4, concat=2, start=300)
    speech, lengths = pad_batch(wavs)
    fe = DynResFrontend(method=method, **RECIPE_FRONTEND).train()
    feats, feats_lengths = fe(speech, lengths)
    compute = fe.dynamic_logmel
    bound = logmel_bound(fe, lengths, feats_lengths)
    for b, w in enumerate(wavs):
        single, _ = compute(w[None], lengths[b : b + 1], feats_lengths[b : b + 1])
        assert_logmel_close(single[0], feats[b, : feats_lengths[b]], **bound)


def test_resample_snaps_rates_to_a_grid_and_keeps_exact_frame_counts(feasible_batch):
    _, speech, lengths = feasible_batch
    fe = DynResFrontend(method="resample", **RECIPE_FRONTEND).train()
    counts, _ = fe.frame_counts(lengths)
    new_rates = features.resample_rates_hz(fe.policy, lengths, counts, fe.resample_grid_hz).tolist()
    assert all(r % fe.resample_grid_hz == 0 for r in new_rates)
    assert len(set(new_rates)) > 1
    # The hop correction after snapping is small: actual rates within half a grid step of the ideal.
    actual = fe.features(speech, lengths).frame_rates_hz
    ideal = torch.tensor([frame_rate(fe.policy, n, int(counts[0])) for n in lengths.tolist()])
    step_hz = fe.resample_grid_hz / fe.hop_length
    # half a grid step, plus the float32 rounding of the two rates
    assert ((actual - ideal).abs() <= step_hz / 2 + float32_allowance(ideal, reduction_length=2)).all()


def test_resample_groups_utterances_of_one_rate_and_matches_one_by_one(feasible_batch):
    # Duplicated utterances snap to the same fs' and are resampled as rows of one tensor;
    # each must still equal the utterance resampled alone, and rates must match the scalar rule.
    wavs, _, _ = feasible_batch
    wavs = list(wavs) + [wavs[0], wavs[2]]
    speech, lengths = pad_batch(wavs)
    fe = DynResFrontend(method="resample", **RECIPE_FRONTEND).train()
    counts, _ = fe.frame_counts(lengths)
    new_rates = features.resample_rates_hz(fe.policy, lengths, counts, fe.resample_grid_hz)
    assert new_rates.tolist() == [int(features.resample_rates_hz(fe.policy, lengths[b : b + 1], counts[b : b + 1],
                                                                 fe.resample_grid_hz)) for b in range(len(wavs))]
    assert len(set(new_rates.tolist())) < len(wavs)
    feats, rates = fe.dynamic_logmel(speech, lengths, counts)
    bound = logmel_bound(fe, lengths, counts)
    for b, w in enumerate(wavs):
        single, single_rate = fe.dynamic_logmel(w[None], lengths[b : b + 1], counts[b : b + 1])
        assert_logmel_close(single[0], feats[b], **bound)  # one row resampled alone vs with others
        assert torch.equal(single_rate, rates[b : b + 1])


@pytest.mark.parametrize("filterbank", ["original", "resampled"])
def test_resample_filterbank_variants_batched_equal_one_by_one_on_a_planned_padded_batch(real_batch, filterbank):
    # A padded plan (each utterance at its own lowest frame count): the rows have different lengths.
    wavs, speech, lengths = real_batch
    fe = DynResFrontend(method="resample", resample_filterbank=filterbank, **RECIPE_FRONTEND).train()
    counts = torch.tensor([frame_range(fe.policy, n)[0] for n in lengths.tolist()])
    assert len(set(counts.tolist())) > 1
    out = fe.features(speech, lengths, plan_of(counts))
    assert out.feats_lengths.tolist() == counts.tolist() and out.feats.shape[1] == int(counts.max())
    bound = logmel_bound(fe, lengths, counts)
    for b, w in enumerate(wavs):
        single = fe.features(w[None], lengths[b : b + 1], plan_of(counts[b : b + 1]))
        assert_logmel_close(single.feats[0], out.feats[b, : counts[b]], **bound)
        assert torch.equal(single.frame_rates_hz, out.frame_rates_hz[b : b + 1])  # per-row float64 arithmetic
        assert (out.feats[b, counts[b] :] == 0).all()


def test_batch_without_common_frame_count_is_planned_as_the_sampler_plans_it_each_at_its_lowest_rate():
    short, long = real_utterances(1, concat=1, start=0)[0], real_utterances(1, concat=8, start=20)[0]
    speech, lengths = pad_batch([short, long])
    fe = DynResFrontend(**RECIPE_FRONTEND).train()
    assert common_frame_count(fe.policy, lengths.tolist(), min_rate_hz=50.0) is None
    out = fe.features(speech, lengths)
    lowest = [frame_range(fe.policy, n, fe.policy.fallback_frame_rate_hz)[0] for n in lengths.tolist()]
    assert out.feats_lengths.tolist() == lowest and out.fallback and fe.num_fallback_batches == 1
    # the same features as that plan given explicitly (the sampler's padded batch)
    planned = fe.features(speech, lengths, plan_of(lowest))
    assert torch.equal(planned.feats, out.feats) and not planned.fallback
    torch.testing.assert_close(out.frame_rates_hz, torch.full((2,), 50.0), atol=0.5, rtol=0)


def test_rates_between_fallback_and_min_are_used_without_padding():
    one, two = real_utterances(1, concat=2, start=60)[0], real_utterances(1, concat=4, start=70)[0]
    ratio = len(two) / len(one)
    assert 130 / 70 < ratio < 130 / 50, ratio  # beyond the clamp, within the fallback
    speech, lengths = pad_batch([one, two])
    fe = DynResFrontend(**RECIPE_FRONTEND).train()
    out = fe.features(speech, lengths)
    assert len(set(out.feats_lengths.tolist())) == 1 and not out.fallback


def test_8k_configuration_gives_100_hz_in_eval_and_one_frame_count_in_training():
    wavs = real_utterances(3, fs_hz=8000, concat=2, start=400)
    speech, lengths = pad_batch(wavs)
    conf = dict(fs="8k", n_fft=256, win_length=200, hop_length=80, n_mels=40)
    fe = DynResFrontend(**conf)
    ref, ref_lengths = default_frontend(**conf).eval()(speech, lengths)
    out, out_lengths = fe.eval()(speech, lengths)
    assert torch.equal(out_lengths, ref_lengths) and torch.equal(out, ref)  # ESPnet's Stft + LogMel
    assert out_lengths.tolist() == [1 + n // 80 for n in lengths.tolist()]  # 100 Hz at 8 kHz
    fe.train()
    feats, feats_lengths = fe(speech, lengths)
    if common_frame_count(fe.policy, lengths.tolist()) is not None:
        assert len(set(feats_lengths.tolist())) == 1


@pytest.mark.parametrize("method", METHODS)
def test_inputs_shorter_than_one_window_do_not_crash(method):
    fe = DynResFrontend(method=method, **RECIPE_FRONTEND).train()
    speech = torch.randn(3, 300)
    lengths = torch.tensor([300, 100, 1])
    feats, feats_lengths = fe(speech, lengths)
    assert torch.isfinite(feats).all()
    assert feats.shape[0] == 3 and (feats_lengths >= 1).all()


@pytest.mark.parametrize("method", METHODS)
def test_framing_handles_utterances_shorter_than_one_window(method):
    # The framing itself (reflection repeated at the ends, as numpy's "reflect") copes with
    # utterances shorter than n_fft / 2, whatever input check forward() applies first.
    fe = DynResFrontend(method=method, **RECIPE_FRONTEND).train()
    speech = torch.randn(3, 300, generator=torch.Generator().manual_seed(0))
    lengths = torch.tensor([300, 100, 1])
    counts = torch.tensor([3, 3, 3])
    compute = fe.dynamic_logmel
    feats, rates = compute(speech, lengths, counts)
    assert feats.shape == (3, 3, 80) and torch.isfinite(feats).all() and torch.isfinite(rates).all()


def test_gradients_flow_and_shapes_are_checked():
    fe = DynResFrontend(**RECIPE_FRONTEND).train()
    with pytest.raises(ValueError, match=r"\(2, 100, 1\) in a training step; it takes mono \(B, T_samples\)"):
        fe(torch.zeros(2, 100, 1), torch.tensor([100, 100]))
    with pytest.raises(ValueError, match=r"\(2, 100, 1, 1\); it takes mono"):
        fe.eval()(torch.zeros(2, 100, 1, 1), torch.tensor([100, 100]))
    fe.train()
    speech = torch.randn(2, 16000, requires_grad=True)
    feats, _ = fe(speech, torch.tensor([16000, 15000]))
    feats.sum().backward()
    assert speech.grad is not None and torch.isfinite(speech.grad).all()


@pytest.mark.parametrize("method", METHODS)
def test_eval_frame_rate_equals_default_frontend_at_that_hop(real_batch, method):
    # eval_frame_rate_hz 80 at 16 kHz is a 200-sample shift: per utterance DefaultFrontend with
    # hop_length 200 (each utterance reflected at its own ends, so batched == one by one), in eval()
    # and under collect-stats' no_grad in train mode.
    wavs, speech, lengths = real_batch
    ref_fe = default_frontend(hop_length=200).eval()
    front = DynResFrontend(method=method, eval_frame_rate_hz=80, **RECIPE_FRONTEND)
    out, out_lengths = front.eval()(speech, lengths)
    assert out_lengths.tolist() == [1 + n // 200 for n in lengths.tolist()]
    for b, w in enumerate(wavs):
        ref, ref_len = ref_fe(w[None], torch.tensor([len(w)]))
        assert int(ref_len[0]) == int(out_lengths[b])
        assert_logmel_close(out[b, : out_lengths[b]], ref[0], melmat=front.logmel.melmat)  # batched, our framing
        if out_lengths[b] < out.size(1):
            assert out[b, out_lengths[b]:].abs().max().item() == 0  # padding frames
    with torch.no_grad():
        stats, _ = front.train()(speech, lengths)
    assert torch.equal(stats, out)
    # A training step is unchanged by it: the same per-utterance rates as without it.
    wavs = real_utterances(4, concat=3, start=100)
    train_speech, train_lengths = pad_batch(wavs)
    torch.manual_seed(0)
    a = front.train().features(train_speech, train_lengths)
    b = DynResFrontend(method=method, **RECIPE_FRONTEND).train().features(train_speech, train_lengths)
    assert torch.equal(a.feats, b.feats) and torch.equal(a.frame_rates_hz, b.frame_rates_hz)


def test_eval_frame_rate_need_not_be_a_whole_hop():
    # 82 Hz at 16 kHz: a shift of 195.12 samples; frames 1 + floor(L x 82 / 16000), each as
    # DefaultFrontend's frame centred on the nearest sample.
    wav = real_utterances(1, concat=2, start=40)[0]
    speech, lengths = pad_batch([wav])
    out, out_lengths = DynResFrontend(eval_frame_rate_hz=82, **RECIPE_FRONTEND).eval()(speech, lengths)
    n = int(lengths[0])
    assert out_lengths.tolist() == [1 + (n * 82) // 16000]
    one, _ = default_frontend(hop_length=1).eval()(speech, lengths)  # every sample a frame centre (one utterance)
    centres = [round(t * 16000 / 82) for t in range(int(out_lengths[0]))]
    assert_logmel_close(out[0], one[0, centres], melmat=default_frontend().logmel.melmat)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(eval_frame_rate_hz=60.0), "eval_frame_rate_hz"),
        (dict(eval_frame_rate_hz=140.0), "eval_frame_rate_hz"),
        (dict(min_frame_rate=70), "min_frame_rate"),
        (dict(method="stretch"), "method"),
        (dict(resample_filterbank="new"), "resample_filterbank"),
        (dict(fallback_frame_rate_hz=80.0), "fallback_frame_rate_hz"),
        (dict(min_frame_rate_hz=140.0), "min_frame_rate_hz"),
    ],
)
def test_bad_frontend_conf_fails_clearly(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        DynResFrontend(**RECIPE_FRONTEND, **kwargs)


@pytest.mark.parametrize(
    "conf",
    [{}, {"n_fft": 512, "hop_length": 160}, {"win_length": 256}, {"n_mels": 40, "fmin": 50}, {"fs": "8k", "n_fft": 256},
     {"hop_length": 80, "window": "hamming"}],
)
def test_omitted_keys_take_default_frontends_defaults(real_batch, conf):
    """Any subset of the shared keys gives DefaultFrontend's features: same defaults for every omitted key."""
    _wavs, speech, lengths = real_batch
    fe = DynResFrontend(**conf).eval()
    ref = DefaultFrontend(**conf, frontend_conf=None).eval()
    assert (fe.n_fft, fe.win_length, fe.hop_length) == (ref.stft.n_fft, ref.stft.win_length, ref.stft.hop_length)
    out, out_lengths = fe(speech, lengths)
    ref_out, ref_lengths = ref(speech, lengths)
    assert torch.equal(out_lengths, ref_lengths)
    assert torch.equal(out, ref_out)  # ESPnet's Stft + LogMel on the same batch


def test_multichannel_input_uses_default_frontends_channel_in_eval_and_is_refused_in_training(real_batch):
    _wavs, speech, lengths = real_batch
    stereo = torch.stack([speech, 0.5 * speech.flip(1)], dim=-1)  # (B, T_samples, 2)
    fe, ref = DynResFrontend(**RECIPE_FRONTEND).eval(), default_frontend().eval()
    out, out_lengths = fe(stereo, lengths)
    ref_out, ref_lengths = ref(stereo, lengths)  # DefaultFrontend: channel 0 in eval
    assert torch.equal(out_lengths, ref_lengths)
    # DefaultFrontend transforms both channels as 2B rows, ours channel 0's B rows: other shapes
    assert_logmel_close(out, ref_out, melmat=fe.logmel.melmat)
    with pytest.raises(ValueError, match=r"\(6, \d+, 2\) in a training step.*Down-mix or pick one channel"):
        DynResFrontend(**RECIPE_FRONTEND).train()(stereo, lengths)


def test_every_default_frontend_key_at_its_default_is_accepted_and_changes_nothing(real_batch):
    """A frontend_conf copied from frontend: default works as it is: each of DefaultFrontend's keys at
    DefaultFrontend's own default builds a dynres frontend whose eval features are DefaultFrontend's."""
    import inspect

    from espnet_dynres.glue.config_checks import check_conf_keys

    _, speech, lengths = real_batch
    params = {k: p.default for k, p in inspect.signature(DefaultFrontend.__init__).parameters.items() if k != "self"}
    assert {"center", "normalized", "onesided", "apply_stft", "frontend_conf"} <= set(params)
    check_conf_keys(params, DynResFrontend, "frontend_conf")  # the YAML path: no unknown key
    for key, default in params.items():
        conf = {**RECIPE_FRONTEND, key: default} if key not in RECIPE_FRONTEND else dict(RECIPE_FRONTEND)
        ours = DynResFrontend(**conf).eval()
        expected, _ = DefaultFrontend(**{"frontend_conf": None, **conf}).eval()(speech, lengths)
        assert torch.equal(ours(speech, lengths)[0], expected), key  # ESPnet's Stft + LogMel


@pytest.mark.parametrize("key, value", [("center", False), ("normalized", True), ("onesided", False),
                                        ("apply_stft", False), ("frontend_conf", {"use_wpe": True}),
                                        ("frontend_conf", {"use_beamformer": True, "btype": "blstmp"})])
def test_default_frontend_keys_that_would_change_the_features_are_refused_by_name(key, value):
    with pytest.raises(ValueError, match=rf"frontend_conf {key}: .*not supported by frontend: dynres.*Remove {key}"):
        DynResFrontend(**RECIPE_FRONTEND, **{key: value})
