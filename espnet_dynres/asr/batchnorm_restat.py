"""BatchNorm statistics re-estimated at the standard frame rate, before every evaluation.

Why (measured in ``docs/training_dynamics.md``, "BatchNorm statistics at the standard rate"):
a BatchNorm layer (the Conformer's convolution module has one per block) normalises with the
statistics of its training batch, and keeps an exponential moving average of them (``momentum``
0.1 over the last ~10 training batches) for evaluation.  Under ``batch_type: dynres`` those
batches run at 70–130 Hz (or lower with ``target_frame_rate_hz``) with dropout on, while
validation and decoding run at the standard rate (100 Hz) with dropout off, so the averaged
statistics are those of other inputs than the ones evaluation normalises.  This module keeps a
uniform sample of the epoch's training utterances (the raw audio, so any frame rate can be
computed from it) and, when the model switches from training to evaluation, replaces every
BatchNorm layer's running mean and variance with the exact frame-weighted statistics of that
layer's input over the sample, encoded in evaluation mode at the standard rate.  Training
itself is unchanged: in training mode BatchNorm normalises with the batch's own statistics and
the running ones are only an output.

The estimate is "precise BatchNorm" (Wu & Johnson, "Rethinking 'Batch' in BatchNorm", 2021,
§3): population statistics computed over many samples with the final weights, instead of
an EMA of per-batch statistics taken while the weights and (here) the frame rate changed.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Callable, Dict, List, Sequence

import torch
from torch.nn.modules.batchnorm import _BatchNorm


def batchnorm_layers(module: torch.nn.Module) -> List[_BatchNorm]:
    """The BatchNorm layers of ``module`` that keep running statistics (those evaluation uses)."""
    return [m for m in module.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]


class _LayerDone(Exception):
    """Raised by a hook to end a forward pass once its BatchNorm layer has been measured."""


class BatchNormRestat:
    """A uniform sample of training utterances and the re-estimate of BatchNorm statistics from it.

    Args:
        num_utts: utterances kept per epoch (reservoir sampling, Vitter's algorithm R, over every
            training utterance :meth:`add` sees); ``0`` keeps none and :meth:`restat` does nothing.
        seed: seed of the reservoir's draws (deterministic given the order of the utterances).

    Raises:
        ValueError: ``num_utts`` is negative.
    """

    def __init__(self, num_utts: int, seed: int = 0):
        if num_utts < 0:
            raise ValueError(f"batchnorm_restat_utts must be >= 0 (0 turns the re-estimate off), got {num_utts}")
        self.num_utts = num_utts
        self._seed = seed
        self._rng = random.Random(seed)
        self._seen = 0
        self._utts: List[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self._utts)

    def add(self, speech: torch.Tensor, speech_lengths: torch.Tensor) -> None:
        """Offer a training batch's utterances to the sample.

        Args:
            speech: ``(B, T_samples)`` float32, padded; an utterance is kept as
                ``speech[b, :speech_lengths[b]]`` (a detached copy).
            speech_lengths: ``(B,)`` int64 samples before padding.
        """
        if self.num_utts == 0:
            return
        assert speech.dim() == 2 and speech_lengths.shape == speech.shape[:1], (
            f"speech must be (B, T_samples) with speech_lengths (B,), got {tuple(speech.shape)} "
            f"and {tuple(speech_lengths.shape)}"
        )
        for b, length in enumerate(speech_lengths.tolist()):
            self._seen += 1
            if len(self._utts) < self.num_utts:
                self._utts.append(speech[b, :length].detach().clone())
                continue
            j = self._rng.randrange(self._seen)
            if j < self.num_utts:
                self._utts[j] = speech[b, :length].detach().clone()

    def clear(self) -> None:
        """Start the next epoch's sample.  The draws restart from ``seed``, so an epoch's sample
        depends only on that epoch's utterance order, and a run resumed from a checkpoint
        (``--resume true``, a fresh sample) re-estimates exactly as the uninterrupted run."""
        self._rng = random.Random(self._seed)
        self._seen = 0
        self._utts = []

    def batches(self, batch_size: int) -> List[torch.Tensor]:
        """The sample as padding-free batches: sorted by length, ``batch_size`` at a time, each
        utterance cut to the shortest of its batch (sorting keeps the cut small).

        Returns:
            ``(B, T_samples)`` float32 tensors, ``B <= batch_size``.
        """
        utts = sorted(self._utts, key=lambda u: u.numel())
        return [torch.stack([u[: group[0].numel()] for u in group])
                for group in (utts[i:i + batch_size] for i in range(0, len(utts), batch_size))]

    @torch.no_grad()
    def restat(self, encode: Callable[[torch.Tensor, torch.Tensor], object], batchnorms: Sequence[_BatchNorm],
               batch_size: int = 16) -> int:
        """Set each layer's running mean and variance to its input statistics over the sample.

        The sample is encoded in padding-free batches (:meth:`batches`), so no padding frame
        enters the statistics, by ``encode(speech (B, T_samples), speech_lengths (B,))``, which
        must run the model in evaluation mode (standard frame rate, no dropout, no
        SpecAugment).  One pass per layer, in the order the layers run, each pass ending at its
        layer; so a layer is measured with every earlier layer already re-estimated, as
        evaluation will see it.  Under ``torch.distributed`` the sums are added over all ranks
        first (every rank must call this, as every rank validates).

        Per layer, over all frames ``x_f`` (``C`` channels) of the sample::

            running_mean = Σ x_f / n,   running_var = (Σ x_f² − n · mean²) / (n − 1)

        (PyTorch's BatchNorm keeps the unbiased variance).  ``num_batches_tracked`` is unchanged.

        Returns:
            The number of BatchNorm layers re-estimated (0 with an empty sample or no layers).
        """
        if not self._utts or not batchnorms:
            return 0
        start = time.perf_counter()
        batches = self.batches(batch_size)

        def run(speech: torch.Tensor) -> None:
            lengths = torch.full((speech.shape[0],), speech.shape[1], dtype=torch.long, device=speech.device)
            try:
                encode(speech, lengths)
            except _LayerDone:
                pass

        order = self._execution_order(run, batches[0], batchnorms)
        for layer in order:
            sums: Dict[str, torch.Tensor] = {}

            def measure(_module, inputs):
                x = inputs[0].detach().to(torch.float64)  # (B, C, T_frames') for BatchNorm1d: per channel C
                dims = [d for d in range(x.dim()) if d != 1]
                parts = dict(s=x.sum(dim=dims), ss=(x * x).sum(dim=dims),
                             n=torch.tensor(float(x.numel() // x.shape[1]), dtype=torch.float64, device=x.device))
                for k, v in parts.items():
                    sums[k] = sums[k] + v if k in sums else v
                raise _LayerDone

            handle = layer.register_forward_pre_hook(measure)
            try:
                for speech in batches:
                    run(speech)
            finally:
                handle.remove()
            s, ss, n = sums["s"], sums["ss"], sums["n"]
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                for t in (s, ss, n):
                    torch.distributed.all_reduce(t)
            mean = s / n
            var = (ss - n * mean * mean).clamp_min(0.0) / (n - 1).clamp_min(1.0)
            layer.running_mean.copy_(mean.to(layer.running_mean.dtype))
            layer.running_var.copy_(var.to(layer.running_var.dtype))
        logging.info(
            "BatchNorm statistics of %d layers re-estimated at the standard frame rate over %d training "
            "utterances (%d samples) in %.1f s",
            len(order), len(self._utts), sum(int(b.numel()) for b in batches), time.perf_counter() - start,
        )
        return len(order)

    @staticmethod
    def _execution_order(run: Callable[[torch.Tensor], None], speech: torch.Tensor,
                         batchnorms: Sequence[_BatchNorm]) -> List[_BatchNorm]:
        """The layers in the order a forward pass of ``speech`` reaches them."""
        seen: List[_BatchNorm] = []
        handles = [bn.register_forward_pre_hook(lambda m, _i: seen.append(m) if m not in seen else None)
                   for bn in batchnorms]
        try:
            run(speech)
        finally:
            for h in handles:
                h.remove()
        return seen  # a layer the encoder never reaches keeps its statistics
