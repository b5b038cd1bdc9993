"""``model: token_normalized`` — ESPnet's CTC/attention model with a per-token loss."""

from __future__ import annotations

from typing import Dict, Tuple

import torch
from typeguard import typechecked

from espnet2.asr.espnet_model import ESPnetASRModel


class TokenNormalizedASRModel(ESPnetASRModel):
    """``ESPnetASRModel`` whose loss is a mean per target token, not per utterance.

    With ``N = text_lengths.sum()`` (target tokens of the batch, without
    ``<sos>``/``<eos>``)::

        loss_ctc   = Σ_b CTC_b / N                        (each intermediate CTC layer alike)
        loss_att   = Σ_b Σ_i CE_{b,i} / N                 (label-smoothed CE, see below)
        loss       = ctc_weight · [(1 - interctc_weight) · loss_ctc
                                   + interctc_weight · mean_layers(loss_interctc)]
                     + (1 - ctc_weight) · loss_att

    The attention sum runs over all decoder targets, i.e. each utterance's tokens
    **and its** ``<eos>``; it is still divided by ``N`` (not ``N + B``) so that
    both branches share one denominator and the model's loss is exactly ESPnet's
    default loss times ``B / N`` (``B`` = batch size).  ``forward`` returns ``N``
    as the batch weight, so ESPnet's trainer, which averages ``loss × weight``
    over data-parallel ranks and divides by the summed weight, computes the
    global ``Σ loss / Σ tokens``.  A batch with ``N = 0`` divides by 1.

    The constructor takes exactly the arguments of ``ESPnetASRModel``
    (``model_conf`` keys are unchanged).

    Raises:
        ValueError: ``length_normalized_loss=True`` (that already divides the
            attention loss by ``N + B``; this model replaces it), a CTC module
            with ``ctc_type`` other than ``builtin`` or ``reduce=False``, or a
            transducer decoder.
    """

    @typechecked
    def __init__(self, *args, **kwargs):
        if kwargs.get("length_normalized_loss", False):
            raise ValueError(
                "model: token_normalized already divides every loss by the batch's token count; "
                "remove length_normalized_loss: true from model_conf."
            )
        super().__init__(*args, **kwargs)
        if self.use_transducer_decoder:
            raise ValueError("model: token_normalized supports CTC/attention models, not transducer decoders")
        if self.ctc_weight > 0.0 and (self.ctc.ctc_type != "builtin" or not self.ctc.reduce):
            raise ValueError(
                f"model: token_normalized needs ctc_conf ctc_type: builtin with reduce: true "
                f"(got ctc_type={self.ctc.ctc_type!r}, reduce={self.ctc.reduce})"
            )

    @staticmethod
    def token_count(text_lengths: torch.Tensor) -> torch.Tensor:
        """``N = text_lengths.sum()`` as float; ``text_lengths (B,)`` int64 tokens."""
        return text_lengths.sum().to(torch.float32)

    @staticmethod
    def ctc_infeasible_count(encoder_out_lens: torch.Tensor, ys_pad: torch.Tensor, ys_pad_lens: torch.Tensor) -> int:
        """Utterances whose encoder output is shorter than ``U + R`` (tokens + adjacent repeats).

        Args:
            encoder_out_lens ``(B,)`` int64 encoder frames; ys_pad ``(B, L)``
            int64 padded targets; ys_pad_lens ``(B,)`` int64 tokens.
        """
        mask = torch.arange(ys_pad.size(1), device=ys_pad.device)[None, :] < ys_pad_lens[:, None]  # (B, L)
        repeats = ((ys_pad[:, 1:] == ys_pad[:, :-1]) & mask[:, 1:]).sum(dim=1)  # (B,)
        return int((encoder_out_lens < ys_pad_lens + repeats).sum())

    def _calc_ctc_loss(self, encoder_out, encoder_out_lens, ys_pad, ys_pad_lens):
        # Stock: Σ_b CTC_b / B  (ESPnet CTC builtin, reduce=True) -> Σ_b CTC_b / N.
        self._ctc_infeasible = self.ctc_infeasible_count(encoder_out_lens, ys_pad, ys_pad_lens)
        loss_ctc, cer_ctc = super()._calc_ctc_loss(encoder_out, encoder_out_lens, ys_pad, ys_pad_lens)
        batch_size = encoder_out.size(0)
        loss_ctc = loss_ctc * batch_size / self.token_count(ys_pad_lens).clamp(min=1.0)
        return loss_ctc, cer_ctc

    def _calc_att_loss(self, encoder_out, encoder_out_lens, ys_pad, ys_pad_lens):
        # Stock (normalize_length=False): Σ_{b,i} CE / B -> Σ_{b,i} CE / N.
        n_tokens = self.token_count(ys_pad_lens).clamp(min=1.0)  # before any in-place change
        loss_att, acc_att, cer_att, wer_att = super()._calc_att_loss(
            encoder_out, encoder_out_lens, ys_pad, ys_pad_lens
        )
        loss_att = loss_att * encoder_out.size(0) / n_tokens
        return loss_att, acc_att, cer_att, wer_att

    def forward(
        self,
        speech: torch.Tensor,
        speech_lengths: torch.Tensor,
        text: torch.Tensor,
        text_lengths: torch.Tensor,
        **kwargs,
    ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], torch.Tensor]:
        """Frontend + encoder + decoder + per-token loss.

        Args:
            speech: ``(B, T_samples)`` float32; speech_lengths ``(B,)`` int64 samples.
            text: ``(B, L_tokens)`` int64 token ids, padded with ``ignore_id``;
                text_lengths ``(B,)`` int64 tokens before padding.

        Returns:
            ``(loss, stats, weight)``: loss ``(1,)`` per-token mean (ESPnet gathers 1-dim); stats
            adds ``batch_tokens`` (N), ``ctc_infeasible`` (utterances whose
            encoder output is shorter than tokens + repeats, when CTC is on) and,
            with the dynres frontend, ``frame_rate_fallback`` (1 if the batch
            was padded at the standard rate); weight ``(1,)`` float is N.
        """
        n_tokens = self.token_count(text_lengths)
        self._ctc_infeasible = None
        loss, stats, _ = super().forward(speech, speech_lengths, text, text_lengths, **kwargs)
        stats["batch_tokens"] = n_tokens.detach().reshape(1).to(loss.device)
        if self._ctc_infeasible is not None:
            # CTC-infeasible utterances in this batch (ESPnet's zero_infinity would hide them as 0 loss).
            stats["ctc_infeasible"] = torch.tensor([float(self._ctc_infeasible)], device=loss.device)
        if getattr(self.frontend, "last_batch_fallback", None) is not None:
            stats["frame_rate_fallback"] = torch.tensor([float(self.frontend.last_batch_fallback)], device=loss.device)
        weight = n_tokens.clamp(min=1.0).detach().reshape(1).to(loss.device)  # (1,) as force_gatherable
        return loss, stats, weight
