import pytest
import torch

from espnet_dynres.asr.token_normalized_model import TokenNormalizedASRModel
from factory import build_tiny_model, pad_batch, random_text, real_utterances


@pytest.fixture(scope="module")
def batch():
    wavs = [w for c in (1, 2, 4) for w in real_utterances(2, concat=c, start=50 * c)]
    speech, speech_lengths = pad_batch(wavs)
    text, text_lengths = random_text(len(wavs), max_len=6, seed=1)
    return dict(speech=speech, speech_lengths=speech_lengths, text=text, text_lengths=text_lengths)


def pair(**model_conf):
    """The same weights as token_normalized and as ESPnet's default model."""
    tn = build_tiny_model(model="token_normalized", model_conf=model_conf).eval()
    stock = build_tiny_model(model="espnet", model_conf=model_conf).eval()
    stock.load_state_dict(tn.state_dict())
    return tn, stock


@pytest.mark.parametrize(
    "model_conf",
    [
        dict(ctc_weight=0.3, lsm_weight=0.1),
        dict(ctc_weight=0.3, lsm_weight=0.1, interctc_weight=0.4),
        dict(ctc_weight=0.0),
        dict(ctc_weight=1.0),
    ],
)
def test_loss_is_stock_loss_redivided_by_tokens(batch, model_conf):
    if model_conf.get("interctc_weight"):
        tn, stock = pair_with_interctc(model_conf)
    else:
        tn, stock = pair(**model_conf)
    loss, stats, weight = tn(**batch)
    ref_loss, ref_stats, ref_weight = stock(**batch)
    b = batch["speech"].size(0)
    n = batch["text_lengths"].sum().item()
    assert ref_weight.item() == b and weight.item() == n
    assert stats["batch_tokens"].item() == n
    torch.testing.assert_close(loss, ref_loss * b / n, rtol=1e-5, atol=1e-6)
    # Gradients scale the same way.
    loss.backward()
    ref_loss.backward()
    for (name, p), (_, q) in zip(tn.named_parameters(), stock.named_parameters()):
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad * b / n, rtol=1e-4, atol=1e-7, msg=name)


def pair_with_interctc(model_conf):
    enc = dict(output_size=16, attention_heads=2, linear_units=32, num_blocks=2, input_layer="conv2d",
               interctc_layer_idx=[1])
    tn = build_tiny_model(model="token_normalized", model_conf=model_conf, encoder_conf=enc).eval()
    stock = build_tiny_model(model="espnet", model_conf=model_conf, encoder_conf=enc).eval()
    stock.load_state_dict(tn.state_dict())
    return tn, stock


def test_ctc_only_loss_is_summed_ctc_over_tokens(batch):
    tn, _ = pair(ctc_weight=1.0)
    loss, _, _ = tn(**batch)
    enc, enc_lens = tn.encode(batch["speech"], batch["speech_lengths"])
    log_probs = tn.ctc.log_softmax(enc).transpose(0, 1)  # (T, B, V)
    ctc_sum = torch.nn.functional.ctc_loss(
        log_probs, batch["text"].clamp(min=0), enc_lens, batch["text_lengths"], reduction="sum", zero_infinity=True
    )
    torch.testing.assert_close(loss.reshape(()), ctc_sum / batch["text_lengths"].sum(), rtol=1e-5, atol=1e-6)


def test_length_normalized_loss_is_refused():
    with pytest.raises(ValueError, match="length_normalized_loss"):
        build_tiny_model(model="token_normalized", model_conf=dict(length_normalized_loss=True))


def test_registered_class_is_an_espnet_model_subclass():
    from espnet2.asr.espnet_model import ESPnetASRModel

    assert issubclass(TokenNormalizedASRModel, ESPnetASRModel)
    assert isinstance(build_tiny_model(model="token_normalized"), TokenNormalizedASRModel)
