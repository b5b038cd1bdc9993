"""``model: token_normalized``: the documented per-token definition, counts, edge batches, accum_grad.

References are built from ESPnet's own default model (``model: espnet``) with the same weights:
its CTC and attention losses are per-utterance means (``Σ / B``), so the documented loss is
ESPnet's loss re-divided by the batch's target tokens: ``stock · B / N`` (see the class docstring).
"""

import logging

import pytest
import torch

from espnet_dynres.asr.token_normalized_model import TokenNormalizedASRModel
from espnet_dynres.core.ctc_minimum import ctc_frames_needed
from factory import (TINY_GRADIENT_REDUCTION_LENGTH, build_tiny_model, deterministic_model_overrides, pad_batch,
                     random_text, real_utterances)
from float_tolerance import assert_close_float32

pytestmark = pytest.mark.numeric  # float results: .ci/run runs them again at another thread count

# The same branch losses (the same operations on the same batch) combined in another order: at most 8
# roundings of products, quotients and sums of non-negative losses on each side (float_tolerance).
LOSS_ARITHMETIC = 16

INTERCTC_ENCODER = dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=2, input_layer="conv2d",
                        interctc_layer_idx=[1])


def make_batch(wavs, token_rows):
    """``speech (B, T_samples)``, ``text (B, L)`` padded with -1, lengths ``(B,)`` int64."""
    speech, speech_lengths = pad_batch(wavs)
    text_lengths = torch.tensor([len(r) for r in token_rows], dtype=torch.long)
    text = torch.full((len(token_rows), max(int(text_lengths.max()), 1)), -1, dtype=torch.long)
    for b, row in enumerate(token_rows):
        text[b, : len(row)] = torch.tensor(row, dtype=torch.long)
    return dict(speech=speech, speech_lengths=speech_lengths, text=text, text_lengths=text_lengths)


def fresh(batch):
    return {k: v.clone() for k, v in batch.items()}


@pytest.fixture(scope="module")
def batch():
    wavs = [w for c in (1, 2, 4) for w in real_utterances(2, concat=c, start=50 * c)]
    speech, speech_lengths = pad_batch(wavs)
    text, text_lengths = random_text(len(wavs), max_len=6, seed=1)
    return dict(speech=speech, speech_lengths=speech_lengths, text=text, text_lengths=text_lengths)


def pair(encoder_conf=None, **model_conf):
    """The same weights as token_normalized and as ESPnet's default model (eval: no dropout)."""
    extra = dict(encoder_conf=encoder_conf) if encoder_conf else {}
    tn = build_tiny_model(model="token_normalized", model_conf=model_conf, **extra).eval()
    stock = build_tiny_model(model="espnet", model_conf=model_conf, **extra).eval()
    stock.load_state_dict(tn.state_dict())
    return tn, stock


def stock_branch_losses(stock, batch):
    """ESPnet's own per-utterance-mean branch losses, with gradients: (ctc, [interctc...], att)."""
    text, text_lengths = batch["text"].clone(), batch["text_lengths"]
    text = text[:, : int(text_lengths.max())]
    enc, enc_lens = stock.encode(batch["speech"], batch["speech_lengths"])
    inter = []
    if isinstance(enc, tuple):
        enc, inter = enc[0], [stock._calc_ctc_loss(h, enc_lens, text, text_lengths)[0] for _, h in enc[1]]
    ctc = stock._calc_ctc_loss(enc, enc_lens, text, text_lengths)[0] if stock.ctc_weight > 0 else None
    att = stock._calc_att_loss(enc, enc_lens, text, text_lengths.clone())[0] if stock.ctc_weight < 1 else None
    return ctc, inter, att


@pytest.mark.parametrize(
    "model_conf",
    [
        dict(ctc_weight=0.3, lsm_weight=0.1),
        dict(ctc_weight=0.3, lsm_weight=0.1, interctc_weight=0.4),
        dict(ctc_weight=0.0, lsm_weight=0.1),
        dict(ctc_weight=1.0),
    ],
    ids=["ctc0.3-lsm", "ctc0.3-lsm-interctc", "ctc0", "ctc1"],
)
def test_loss_is_stock_loss_redivided_by_documented_counts(batch, model_conf):
    encoder_conf = INTERCTC_ENCODER if model_conf.get("interctc_weight") else None
    tn, stock = pair(encoder_conf, **model_conf)
    loss, stats, weight = tn(**fresh(batch))
    b = batch["speech"].size(0)
    n = float(batch["text_lengths"].sum())
    lam, ic = model_conf["ctc_weight"], model_conf.get("interctc_weight", 0.0)

    ctc, inter, att = stock_branch_losses(stock, fresh(batch))
    expected = 0.0
    if lam > 0:
        assert stats["ctc_infeasible"].item() == 0
        ctc_term = ctc * b / n
        if inter:
            ctc_term = (1 - ic) * ctc_term + ic * (sum(inter) / len(inter)) * b / n
        expected = expected + lam * ctc_term
        assert_close_float32(stats["loss_ctc"], (ctc * b / n).detach().reshape(1), reduction_length=LOSS_ARITHMETIC)
    if lam < 1:
        expected = expected + (1 - lam) * att * b / n
        assert_close_float32(stats["loss_att"], (att * b / n).detach().reshape(1), reduction_length=LOSS_ARITHMETIC)
    assert weight.item() == n and stats["batch_tokens"].item() == n
    assert_close_float32(loss.reshape(()), expected.reshape(()), reduction_length=LOSS_ARITHMETIC)
    assert stats["loss"].item() == loss.item()  # the same product

    # Gradients: ESPnet's loss times the float32 B / n, back-propagated: the same operations with the
    # same seed, so bit-identical (the combination's values are checked above).
    loss.backward()
    stock_loss, _, _ = stock(**fresh(batch))
    (stock_loss * torch.tensor(b / n, dtype=torch.float32)).backward()
    for (name, p), (_, q) in zip(tn.named_parameters(), stock.named_parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if q.grad is not None:
            assert torch.equal(p.grad, q.grad), name


def test_ctc_and_attention_keep_espnets_balance(batch):
    """One divisor for both branches: the loss is exactly ESPnet's loss times B / N."""
    tn, stock = pair(ctc_weight=0.3, lsm_weight=0.1)
    loss, _, _ = tn(**fresh(batch))
    stock_loss, _, stock_weight = stock(**fresh(batch))
    ratio = float(stock_weight) / float(batch["text_lengths"].sum())
    assert torch.equal(loss, stock_loss * torch.tensor(ratio, dtype=torch.float32))  # the same product


def test_ctc_only_loss_is_summed_ctc_over_tokens(batch):
    tn, _ = pair(ctc_weight=1.0)
    loss, _, _ = tn(**fresh(batch))
    enc, enc_lens = tn.encode(batch["speech"], batch["speech_lengths"])
    log_probs = tn.ctc.log_softmax(enc).transpose(0, 1)  # (T, B, V)
    ctc_sum = torch.nn.functional.ctc_loss(
        log_probs, batch["text"].clamp(min=0), enc_lens, batch["text_lengths"], reduction="sum", zero_infinity=True
    )
    # ESPnet's CTC (concatenated targets, / B, x B / N) against torch's (padded targets, / N): CTC's
    # recursion (<= 4 roundings a frame, relative to the non-negative loss), the log-softmax, the batch
    # sum and the quotients
    roundings = 4 * int(enc_lens.max()) + log_probs.size(-1) + len(enc_lens) + LOSS_ARITHMETIC
    assert_close_float32(loss.reshape(()), ctc_sum / batch["text_lengths"].sum(), reduction_length=roundings)


def short_long_batch(token_rows):
    """Utterances 0, 2, 4 are 0.4 s (9 encoder frames); 1, 3, 5 are four joined digits."""
    short = [w[:6400] for w in real_utterances(3, start=300)]
    long = real_utterances(3, concat=4, start=320)
    wavs = [w for pair_ in zip(short, long) for w in pair_]
    return make_batch(wavs, token_rows)


def test_infeasible_utterances_are_counted_and_warned_about(caplog):
    rows = [[2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 2, 3], [2, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11, 2, 3, 4, 5], [6],
            [5, 5, 5, 5, 5], [7, 8, 9]]
    batch = short_long_batch(rows)
    tn, _ = pair(ctc_weight=1.0)
    enc, enc_lens = tn.encode(batch["speech"], batch["speech_lengths"])
    feasible = [int(t) >= ctc_frames_needed(r) for t, r in zip(enc_lens, rows)]
    assert feasible.count(False) >= 2 and feasible.count(True) >= 2  # the premise
    ids = [f"utt{i}" for i in range(len(rows))]
    with caplog.at_level(logging.WARNING):
        loss, stats, weight = tn(**fresh(batch), utt_id=ids)
    n = sum(len(r) for r in rows)
    assert stats["ctc_infeasible"].item() == feasible.count(False)
    assert stats["batch_tokens"].item() == n and weight.item() == n
    # loss = Σ over feasible utterances of their CTC / N (infeasible ones add 0), with torch's CTC directly.
    log_probs = tn.ctc.log_softmax(enc).transpose(0, 1)
    per_utt = torch.nn.functional.ctc_loss(log_probs, batch["text"].clamp(min=0), enc_lens, batch["text_lengths"],
                                           reduction="none", zero_infinity=False)
    mask = torch.tensor(feasible)
    assert torch.isinf(per_utt[~mask]).all()  # ESPnet's zero_infinity would silently make these 0
    roundings = 4 * int(enc_lens.max()) + log_probs.size(-1) + len(enc_lens) + LOSS_ARITHMETIC  # as above
    assert_close_float32(loss.reshape(()), per_utt[mask].sum() / n, reduction_length=roundings)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert f"{feasible.count(False)} utterance(s)" in warned
    assert all(ids[i] in warned for i, ok in enumerate(feasible) if not ok)


@pytest.mark.parametrize("ctc_weight", [0.3, 1.0])
def test_all_infeasible_batch_gives_finite_loss(ctc_weight):
    rows = [[2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 2, 3]] * 2
    batch = make_batch([w[:6400] for w in real_utterances(2, start=300)], rows)
    tn = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=ctc_weight)).train()
    loss, stats, weight = tn(**fresh(batch))
    assert torch.isfinite(loss).all()
    assert stats["ctc_infeasible"].item() == 2
    assert stats["loss_ctc"].item() == 0.0
    assert weight.item() == 2 * 12
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in tn.parameters() if p.grad is not None)


@pytest.mark.parametrize("ctc_weight", [0.0, 0.3, 1.0])
def test_zero_token_batch_is_finite_and_reported(ctc_weight, caplog):
    batch = make_batch(real_utterances(3, start=200), [[], [], []])
    tn = build_tiny_model(model="token_normalized", model_conf=dict(ctc_weight=ctc_weight)).train()
    with caplog.at_level(logging.WARNING):
        loss, stats, weight = tn(**fresh(batch))
    assert torch.isfinite(loss).all()
    assert stats["batch_tokens"].item() == 0 and stats["empty_transcripts"].item() == 3
    assert weight.item() == 1  # n = max(N, 1): the <eos> targets divided by 1
    if ctc_weight > 0:
        assert stats["ctc_infeasible"].item() == 0
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in tn.parameters() if p.grad is not None)
    assert any("3 utterance(s)" in r.getMessage() and "empty transcript" in r.getMessage() for r in caplog.records)


def grads_of(model, micro_batches, scale):
    """ESPnet's accumulation: loss / accum_grad per micro-batch, gradients summed by backward."""
    model.zero_grad()
    for mb in micro_batches:
        loss, _, _ = model(**fresh(mb))
        (loss * scale).sum().backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def cat_batches(a, b):
    """One batch holding the utterances of ``a`` and ``b``."""
    rows = [r[:n].tolist() for r, n in zip(list(a["text"]) + list(b["text"]),
                                            list(a["text_lengths"]) + list(b["text_lengths"]))]
    speech = [s[:n] for s, n in zip(list(a["speech"]) + list(b["speech"]),
                                    list(a["speech_lengths"]) + list(b["speech_lengths"]))]
    return make_batch(speech, rows)


@pytest.mark.parametrize("equal_counts", [True, False])
def test_accum_grad_is_the_mean_of_micro_batch_per_token_gradients(equal_counts):
    """``accum_grad: k`` = (1/k) Σ_j ∇(S_j / N_j); one k-times-larger batch = ∇(Σ_j S_j / Σ_j N_j).

    They agree when every micro-batch has the same count N_j, and differ otherwise.
    """
    wavs = real_utterances(4, concat=2, start=400)
    # Equal lengths: DefaultFrontend's STFT reflects at the end of the padded tensor, so batch
    # padding would change the last frames of shorter utterances and mix batch composition in.
    wavs = [w[: min(len(v) for v in wavs)] for w in wavs]
    second = [[2, 3], [4, 5]] if equal_counts else [[2, 3, 4, 5, 6, 7, 8, 9], [4, 5, 6, 7, 8, 9, 10]]
    mb = [make_batch(wavs[:2], [[6, 7], [8, 9]]), make_batch(wavs[2:], second)]
    model = build_tiny_model(**deterministic_model_overrides(ctc_weight=0.0)).train()
    accumulated = grads_of(model, mb, scale=1 / 2)
    whole = grads_of(model, [cat_batches(*mb)], scale=1.0)
    per_mb = [grads_of(model, [m], scale=1.0) for m in mb]
    d = [float(m["text_lengths"].sum()) for m in mb]
    # the same micro-batch gradients, halved (exact in binary floating point) and summed: bit-identical
    assert torch.equal(accumulated, (per_mb[0] + per_mb[1]) / 2)
    # One batch of four against two of two: other shapes, equal up to float32 rounding. The scale is the
    # largest gradient entry (norm-wise): some entries are 0 in exact arithmetic (attention key biases,
    # softmax being shift-invariant) and hold only the rounding of the terms around them.
    combined = (d[0] * per_mb[0] + d[1] * per_mb[1]) / sum(d)
    scale = float(combined.abs().max())
    assert_close_float32(whole, combined, reduction_length=TINY_GRADIENT_REDUCTION_LENGTH, scale=scale)
    gap = float((accumulated - whole).norm() / whole.norm())
    if equal_counts:
        assert_close_float32(accumulated, whole, reduction_length=TINY_GRADIENT_REDUCTION_LENGTH, scale=scale)
    else:  # a real difference, far beyond rounding
        with pytest.raises(AssertionError, match="not equal up to float32 rounding"):
            assert_close_float32(accumulated, whole, reduction_length=TINY_GRADIENT_REDUCTION_LENGTH, scale=scale)
        assert gap > 1e-2


def test_length_normalized_loss_is_refused():
    with pytest.raises(ValueError, match="length_normalized_loss"):
        build_tiny_model(model="token_normalized", model_conf=dict(length_normalized_loss=True))


def test_transducer_decoder_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="not transducer decoders"):
        build_tiny_model(model="token_normalized", decoder="transducer",
                         decoder_conf=dict(hidden_size=16, rnn_type="lstm"), joint_net_conf=dict(joint_space_size=16))


def test_registered_class_is_an_espnet_model_subclass():
    from espnet2.asr.espnet_model import ESPnetASRModel

    assert issubclass(TokenNormalizedASRModel, ESPnetASRModel)
    assert isinstance(build_tiny_model(model="token_normalized"), TokenNormalizedASRModel)
