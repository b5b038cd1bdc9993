"""``model: token_normalized`` — ESPnet's CTC/attention model with a per-token loss."""

from __future__ import annotations

import inspect
import logging
from typing import Dict, Optional, Tuple

import torch
from typeguard import typechecked

from espnet2.asr.espnet_model import ESPnetASRModel

from espnet_dynres.asr.dynres_model import DynResASRModel
from espnet_dynres.asr.step_context import StepContext


def check_normalize_stats(frontend: Optional[torch.nn.Module], normalize: Optional[torch.nn.Module]) -> None:
    """``feats_stats.npz`` (``normalize: global_mvn``) has one mean per frontend output dimension.

    Raises:
        ValueError: the statistics' dimension differs from ``frontend.output_size()`` (names the file and fix).
    """
    mean = getattr(normalize, "mean", None)
    if frontend is None or not isinstance(mean, torch.Tensor):
        return
    if mean.numel() != frontend.output_size():
        stats_file = getattr(normalize, "stats_file", "the statistics file")
        raise ValueError(
            f"{stats_file} holds statistics of {mean.numel()}-dimensional features, but the frontend gives "
            f"{frontend.output_size()} (n_mels). The statistics come from another frontend setting: re-run "
            "collect-stats (recipe stage 10) with this config, or point normalize_conf stats_file at the matching file."
        )


class TokenNormalizedASRModel(DynResASRModel):
    """``model: dynres`` (:class:`~espnet_dynres.asr.dynres_model.DynResASRModel`) with a per-token mean loss.

    For a batch of ``B`` utterances with ``U_b`` target tokens each (``text_lengths``, no ``<sos>``/``<eos>``)::

        N         = Σ_b U_b                       (text_lengths.sum(), the batch's target tokens)
        n         = max(N, 1)
        S_ctc     = Σ_b CTC_b                     (ESPnet's builtin CTC, zero_infinity)
        S_ctc^l   = the same for intermediate CTC layer l
        S_att     = Σ_b Σ_{i=1..U_b+1} CE(b, i)   (ESPnet's label-smoothed criterion, <eos> included)
        loss_ctc  = S_ctc / n,   loss_interctc = mean_l S_ctc^l / n,   loss_att = S_att / n
        loss      = ctc_weight · [(1 − interctc_weight) · loss_ctc + interctc_weight · loss_interctc]
                    + (1 − ctc_weight) · loss_att

    ESPnet's default divides the same combination by ``B``: ``loss = stock_loss · B / n`` (every ``loss*`` stat
    likewise).  The batch weight ``n`` makes ESPnet's DDP average ``Σ S / Σ n``, the global per-token mean
    (``docs/loss_normalization.md``).  Utterances without a CTC alignment (CTC loss 0) and empty transcripts are
    counted and warned about.  The gradient norm is about ``B / N`` times ESPnet's: ``grad_clip`` is checked by
    :func:`espnet_dynres.glue.config_checks.check_token_normalized_grad_clip`.  Stats besides ESPnet's:
    ``batch_tokens`` (``N``), ``batch_size`` (``B``), ``ctc_infeasible``, ``empty_transcripts``.

    Raises:
        ValueError: ``length_normalized_loss=True``, CTC other than ``ctc_type: builtin`` with ``reduce: true`` and
            ``zero_infinity: true``, a transducer or linear (classification) decoder, or ``aux_ctc``.
    """

    @typechecked
    def __init__(self, *args, **kwargs):
        if kwargs.get("length_normalized_loss", False):
            raise ValueError("model: token_normalized already divides every loss by the batch's token count; "
                             "remove length_normalized_loss: true from model_conf.")
        espnet_kwargs = {k: v for k, v in kwargs.items() if k != "batchnorm_restat_batches"}  # DynResASRModel's
        bound = inspect.signature(ESPnetASRModel.__init__).bind_partial(None, *args, **espnet_kwargs).arguments
        if bound.get("joint_network") is not None:  # before ESPnet's __init__, which imports the RNN-T loss
            raise ValueError("model: token_normalized supports CTC/attention models, not transducer decoders "
                             f"(decoder {type(bound.get('decoder')).__name__} with a joint network); "
                             "use model: espnet for a transducer.")
        super().__init__(*args, **kwargs)
        check_normalize_stats(self.frontend, self.normalize)
        if self.use_linear_decoder:
            raise ValueError("model: token_normalized needs an attention decoder, not a linear (classification) one")
        if self.aux_ctc is not None:
            raise ValueError("model: token_normalized does not support aux_ctc (its targets are not the transcript)")
        if self.ctc_weight > 0.0:
            zero_infinity = getattr(getattr(self.ctc, "ctc_loss", None), "zero_infinity", False)
            if self.ctc.ctc_type != "builtin" or not self.ctc.reduce or not zero_infinity:
                raise ValueError(
                    "model: token_normalized needs ctc_conf ctc_type: builtin, reduce: true, zero_infinity: true "
                    f"(got ctc_type={self.ctc.ctc_type!r}, reduce={self.ctc.reduce}, zero_infinity={zero_infinity})")

    @staticmethod
    def ctc_feasible(encoder_out_lens: torch.Tensor, ys_pad: torch.Tensor, ys_pad_lens: torch.Tensor) -> torch.Tensor:
        """``(B,)`` bool: encoder frames ``T_b ≥ U_b + R_b`` (tokens + adjacent repeats), from
        ``encoder_out_lens`` ``(B,)``, ``ys_pad`` ``(B, L)`` and ``ys_pad_lens`` ``(B,)``, all int64."""
        mask = torch.arange(ys_pad.size(1), device=ys_pad.device)[None, :] < ys_pad_lens[:, None]  # (B, L)
        repeats = ((ys_pad[:, 1:] == ys_pad[:, :-1]) & mask[:, 1:]).sum(dim=1)  # (B,)
        return encoder_out_lens >= ys_pad_lens + repeats

    @staticmethod
    def _warn(step: StepContext, what: str, flags: torch.Tensor) -> None:
        count = int(flags.sum())
        if count == 0:
            return
        ids = step.utt_ids
        names = [ids[i] for i in flags.nonzero().flatten().tolist()] if ids is not None else []
        shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
        logging.warning(f"token_normalized: {count} utterance(s) of this batch {what}{': ' + shown if shown else ''}")

    def _calc_ctc_loss(self, encoder_out, encoder_out_lens, ys_pad, ys_pad_lens):
        # Counted once per forward (all CTC layers share T_b and targets).
        step = self._step
        if step is not None and step.ctc_infeasible is None:
            feasible = self.ctc_feasible(encoder_out_lens, ys_pad, ys_pad_lens)
            step.ctc_infeasible = int((~feasible).sum())
            self._warn(step, "have fewer encoder frames than their CTC targets need (tokens + repeats); "
                       "their CTC loss is 0", ~feasible)
        return super()._calc_ctc_loss(encoder_out, encoder_out_lens, ys_pad, ys_pad_lens)

    def step_forward(self, step: StepContext, speech: torch.Tensor, speech_lengths: torch.Tensor,
                     text: torch.Tensor, text_lengths: torch.Tensor, **kwargs
                     ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], torch.Tensor]:
        """Frontend + encoder + decoder + per-token loss (class docstring) inside ``step``.

        Arguments as :meth:`DynResASRModel.forward` (``text_lengths`` 0 allowed; ``utt_id`` names utterances in
        warnings).  Returns ``(loss, stats, weight)``: loss ``(1,)`` per-token mean, every ``loss*`` stat per
        token, weight ``(1,)`` float32 ``n``.
        """
        assert text_lengths.dim() == 1 and speech.size(0) == text.size(0) == text_lengths.size(0), (
            f"speech (B, T_samples[, C]) or features (B, T_frames, D), text (B, L) and text_lengths (B,) expected, got speech {tuple(speech.shape)}, "
            f"text {tuple(text.shape)}, text_lengths {tuple(text_lengths.shape)}")
        kwargs.pop("utt_id", None)  # in the step
        batch_size = text_lengths.size(0)
        tokens = text_lengths.sum().to(torch.float32)  # () N, kept on the device (no host sync)
        n = tokens.clamp(min=1.0)  # () n = max(N, 1)
        self._warn(step, "have an empty transcript (only <eos> is trained)", text_lengths == 0)
        loss, stats, _ = super().step_forward(step, speech, speech_lengths, text, text_lengths, **kwargs)
        device = loss.device
        # × B / n (quotient in float64, then the loss dtype).
        scale = (batch_size / n.double()).to(device=device, dtype=loss.dtype)
        loss = loss * scale
        for key, value in stats.items():
            if key.startswith("loss") and value is not None:
                stats[key] = value * scale
        counts = {"batch_tokens": tokens, "batch_size": torch.tensor(float(batch_size)),
                  "empty_transcripts": (text_lengths == 0).sum()}
        if step.ctc_infeasible is not None:
            counts["ctc_infeasible"] = torch.tensor(float(step.ctc_infeasible))
        for name, value in counts.items():
            stats[name] = value.to(device=device, dtype=torch.float32).reshape(1)
        weight = n.to(device=device, dtype=torch.float32).reshape(1)
        return loss, stats, weight
