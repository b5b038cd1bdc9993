"""BatchNorm statistics re-estimated at the standard frame rate, before every evaluation.

Why (measured in ``docs/training_dynamics.md``, "BatchNorm statistics at the standard rate"):
a BatchNorm layer (the Conformer's convolution module has one per block) normalises with the
statistics of its training batch, and keeps an exponential moving average of them (``momentum``
0.1 over the last ~10 training batches) for evaluation.  Under ``batch_type: dynres`` those
batches run at 70–130 Hz (or lower with ``target_frame_rate_hz``) with dropout on, while
validation and decoding run at the standard rate (100 Hz) with dropout off, so the averaged
statistics are those of other inputs than the ones evaluation normalises.  This module keeps a
uniform sample of the epoch's training utterances, as large as a few validation batches (a budget
in standard frames or input elements, never a count of utterances, so that its cost does not grow with
the length of the utterances), in the model's input as it came (raw audio, so any frame rate can be
computed from it, or extracted features ``(T_frames, D)``), in host memory,
and, when the model switches from training to evaluation, replaces every
BatchNorm layer's running mean and variance with the exact frame-weighted statistics of that
layer's input over the sample, encoded in evaluation mode at the standard rate.  Training
itself is unchanged: in training mode BatchNorm normalises with the batch's own statistics and
the running ones are only an output.

The re-estimate is a pass over data like validation and is bounded like it: its sample holds
``batchnorm_restat_batches`` of the run's evaluation budgets, its batches obey that budget
(:class:`RestatBudget`, from ``valid_batch_bins`` or ``batch_bins``), are moved to the model's
device one at a time, and an utterance over the budget alone is encoded alone, as the validation sampler gives it a batch of its own.

The estimate is "precise BatchNorm" (Wu & Johnson, "Rethinking 'Batch' in BatchNorm", 2021,
§3): population statistics computed over many samples with the final weights, instead of
an EMA of per-batch statistics taken while the weights and (here) the frame rate changed.
"""

from __future__ import annotations

import argparse
import heapq
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from espnet_dynres.core.batch_planner import evaluation_batch_fits
from espnet_dynres.core.frame_rate_policy import standard_frame_counts
from espnet_dynres.glue.data_checks import read_keyed_file


def batchnorm_layers(module: torch.nn.Module) -> List[_BatchNorm]:
    """The BatchNorm layers of ``module`` that keep running statistics (those evaluation uses)."""
    return [m for m in module.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]


def encoder_blocks(model: torch.nn.Module) -> Optional[List[torch.nn.Module]]:
    """The blocks of an ESPnet encoder, in order (``model.encoder.encoders``: the ``MultiSequential``
    or ``ModuleList`` of Conformer, Transformer, E-Branchformer ... layers), or ``None``."""
    blocks = getattr(getattr(model, "encoder", None), "encoders", None)
    if isinstance(blocks, (torch.nn.Sequential, torch.nn.ModuleList)) and len(blocks) > 0:
        return list(blocks)
    return None


class _LayerDone(Exception):
    """Raised by a hook to end a forward pass once its BatchNorm layer has been measured."""


# ESPnet batch types whose budget is a count of utterances (``batch_size``), not ``batch_bins``.
BATCH_SIZE_TYPES = ("unsorted", "sorted", "folded")


@dataclass(frozen=True)
class RestatBudget:
    """How large one batch of the re-estimate may be: the run's evaluation budget.

    A batch of the re-estimate costs ``B × the cost of its longest member``, the padded cost the
    validation samplers plan with, although the batch itself is cut to its shortest member (so
    what is computed is never more).  The cost of one utterance is

    * ``hop_length`` set: its standard frame count ``1 + T_samples // hop_length`` — the unit of
      ``batch_type: dynres``'s ``batch_bins`` (feature frames);
    * ``hop_length`` ``None``: its elements ``T × D`` (samples for raw audio, frames × feature
      dimension for extracted features) — the unit of ESPnet's ``numel`` and ``length`` budgets.

    Args:
        batch_bins: most cost per batch; ``None``: no bins limit (then ``max_batch_size`` limits).
        max_batch_size: most utterances per batch; ``None``: no count limit.  Both ``None`` is
            refused: a pass over data is always bounded.
        hop_length: see above (samples per standard frame).
        fold_length: ESPnet's ``folded`` rule: with it, a batch whose longest member has ``L``
            (samples or frames) holds at most ``max(1, max_batch_size // (1 + L // fold_length))``.

    An utterance whose cost alone is over ``batch_bins`` is encoded alone (never joins a batch).

    Raises:
        ValueError: neither limit given, or a limit below 1.
    """

    batch_bins: Optional[int] = None
    max_batch_size: Optional[int] = 1
    hop_length: Optional[int] = None
    fold_length: Optional[int] = None

    def __post_init__(self):
        if self.batch_bins is None and self.max_batch_size is None:
            raise ValueError("RestatBudget needs batch_bins or max_batch_size: the re-estimate is a bounded pass")
        for name in ("batch_bins", "max_batch_size", "hop_length", "fold_length"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"RestatBudget {name} must be >= 1, got {value}")

    def cost(self, utt: torch.Tensor) -> int:
        """Cost of one utterance ``(T_samples,)``, ``(T_samples, C)`` or ``(T_frames, D)`` (class docstring)."""
        if self.hop_length is not None:
            return int(standard_frame_counts([int(utt.shape[0])], self.hop_length)[0])
        return int(utt.numel())

    def fits(self, size: int, longest: torch.Tensor) -> bool:
        """Whether ``size`` utterances whose longest is ``longest`` make one batch: the planner's
        evaluation cost (:func:`~espnet_dynres.core.batch_planner.evaluation_batch_fits`), with
        ESPnet's ``folded`` limit on the count."""
        if size == 1:
            return True
        limit = self.max_batch_size
        if limit is not None and self.fold_length is not None:
            limit = max(1, limit // (1 + int(longest.shape[0]) // self.fold_length))
        return evaluation_batch_fits(size, self.cost(longest), self.batch_bins, limit)

    def sample_cost(self, utt: torch.Tensor) -> int:
        """An utterance's share of the re-estimate's sample (:class:`BatchNormRestat`): its
        :meth:`cost` under a bins budget, ``1`` under a count budget (``batch_bins`` ``None``)."""
        return self.cost(utt) if self.batch_bins is not None else 1

    def sample_capacity(self, num_batches: int) -> int:
        """Most total :meth:`sample_cost` of a sample of ``num_batches`` evaluation batches:
        ``num_batches × batch_bins``, or ``num_batches × max_batch_size`` under a count budget."""
        return num_batches * (self.batch_bins if self.batch_bins is not None else self.max_batch_size)

    @classmethod
    def from_task_args(cls, args: argparse.Namespace, hop_length: Optional[int] = None) -> "RestatBudget":
        """The budget of the run's validation: ``valid_batch_type`` (else ``batch_type``) with
        ``valid_batch_bins`` / ``valid_batch_size`` (else ``batch_bins`` / ``batch_size``), as
        ESPnet's trainer builds the validation iterator.

        Args:
            args: ESPnet's task arguments.
            hop_length: the dynres frontend's standard frame shift (samples); used with
                ``dynres`` batches, whose ``batch_bins`` counts standard frames.

        Raises:
            ValueError: a ``dynres`` budget without ``hop_length`` (no dynres frontend).
        """
        batch_type = getattr(args, "valid_batch_type", None) or getattr(args, "batch_type", "folded")
        bins = getattr(args, "valid_batch_bins", None) or getattr(args, "batch_bins", None)
        size = getattr(args, "valid_batch_size", None) or getattr(args, "batch_size", None)
        if batch_type == "dynres":
            if hop_length is None:
                raise ValueError("batch_type dynres plans frame counts for the dynres frontend (its batch_bins "
                                 "counts standard frames), but the model has another frontend; set frontend: dynres "
                                 "(or use another batch_type).")
            return cls(batch_bins=int(bins), max_batch_size=getattr(args, "max_batch_size", None),
                       hop_length=int(hop_length))
        if batch_type in BATCH_SIZE_TYPES:
            folds = list(getattr(args, "fold_length", None) or [])
            fold = int(folds[0]) if batch_type == "folded" and folds else None
            return cls(batch_bins=None, max_batch_size=int(size), fold_length=fold)
        return cls(batch_bins=int(bins), max_batch_size=None)  # numel, length: elements (samples x dims)


class BatchNormRestat:
    """A uniform sample of training utterances, bounded in input, and the re-estimate of BatchNorm
    statistics from it.

    The sample holds each kept utterance as the model received it, unpadded: raw audio
    ``(T_samples,)`` (or ``(T_samples, C)``) or extracted features ``(T_frames, D)``, as a copy
    in host memory (pinned when it came from a CUDA device, so the copy back is asynchronous);
    the device holds one batch of it at a time, only while :meth:`restat` runs.

    **Its size is a budget, not a count of utterances.**  Every utterance :meth:`add` sees gets a
    random key (uniform in [0, 1), drawn in the order the utterances come); the sample is the
    longest run of utterances in key order whose total cost fits ``num_batches`` evaluation
    batches (:meth:`RestatBudget.sample_capacity`: ``num_batches × batch_bins`` standard frames or
    input elements, or ``num_batches × max_batch_size`` utterances under a count budget).  That
    is a prefix of a uniformly random order of the epoch's utterances, so every utterance is
    equally likely to be drawn first, and the re-estimate costs at most about ``num_batches``
    validation batches per BatchNorm layer however long the utterances are.  It is computed in
    one pass (the kept set only shrinks from the largest key), holding at most the capacity plus
    one batch.  An utterance whose cost alone is over the capacity ends the run where its key
    falls.

    Args:
        num_batches: size of the sample per epoch, in evaluation batches (see above); ``0``
            keeps none and :meth:`restat` does nothing.
        seed: seed of the keys (deterministic given the order of the utterances).

    Raises:
        ValueError: ``num_batches`` is negative.
    """

    def __init__(self, num_batches: int, seed: int = 0):
        if num_batches < 0:
            raise ValueError(f"batchnorm_restat_batches must be >= 0 (0 turns the re-estimate off), got {num_batches}")
        self.num_batches = num_batches
        self._seed = seed
        self.clear()

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def _utts(self) -> List[torch.Tensor]:
        """The kept utterances, in key order."""
        return [entry[2] for entry in sorted(self._kept, key=lambda e: -e[0])]

    @property
    def total_cost(self) -> int:
        """The kept utterances' total cost (:meth:`RestatBudget.sample_cost`)."""
        return self._total

    @staticmethod
    def _host_copy(utt: torch.Tensor) -> torch.Tensor:
        copy = utt.detach().to("cpu", copy=True)
        return copy.pin_memory() if utt.is_cuda else copy

    def add(self, speech: torch.Tensor, speech_lengths: torch.Tensor, budget: RestatBudget) -> None:
        """Offer a training batch's utterances to the sample.

        Args:
            speech: ``(B, T_samples)`` float32 raw audio, ``(B, T_samples, C)``, or extracted
                features ``(B, T_frames, D)``, padded along dim 1; an utterance is kept as
                ``speech[b, :speech_lengths[b]]`` (a detached host copy).
            speech_lengths: ``(B,)`` int64 samples (or frames) before padding.
            budget: the run's evaluation budget; the sample's capacity is
                ``budget.sample_capacity(num_batches)`` (class docstring).

        Raises:
            ValueError: ``speech`` is not 2-D or 3-D, or ``speech_lengths`` is not ``(B,)``.
        """
        if self.num_batches == 0:
            return
        if speech.dim() not in (2, 3) or speech_lengths.shape != speech.shape[:1]:
            raise ValueError(
                f"the BatchNorm re-estimate takes speech (B, T_samples), (B, T_samples, C) or features "
                f"(B, T_frames, D) with speech_lengths (B,), got {tuple(speech.shape)} and "
                f"{tuple(speech_lengths.shape)}"
            )
        capacity = budget.sample_capacity(self.num_batches)
        added = []
        for b, length in enumerate(speech_lengths.tolist()):
            key = self._rng.random()
            if key >= self._cutoff:
                continue  # after an utterance that did not fit in key order: never in this epoch's sample
            utt = speech[b, :length]
            cost = budget.sample_cost(utt)
            self._count += 1
            entry = [-key, self._count, utt, cost]  # a max-heap on the key
            heapq.heappush(self._kept, entry)
            added.append(entry)
            self._total += cost
            while self._total > capacity:
                neg_key, _, _, dropped = heapq.heappop(self._kept)
                self._total -= dropped
                self._cutoff = -neg_key
        for entry in added:  # copy only what stays, after the batch's evictions
            if -entry[0] < self._cutoff:
                entry[2] = self._host_copy(entry[2])

    def clear(self) -> None:
        """Start the next epoch's sample.  The keys restart from ``seed``, so an epoch's sample
        depends only on that epoch's utterance order, and a run resumed from a checkpoint
        (``--resume true``, a fresh sample) re-estimates exactly as the uninterrupted run."""
        self._rng = random.Random(self._seed)
        self._kept: List[list] = []  # heap of [-key, arrival, utterance, cost]
        self._total = 0
        self._count = 0
        self._cutoff = 1.0  # keys at or above it are out (the smallest key evicted so far)

    def batches(self, budget: RestatBudget) -> List[torch.Tensor]:
        """The sample as padding-free batches inside ``budget``, in host memory.

        Sorted by length; a batch grows while ``budget.fits`` (``B ×`` the cost of its longest
        member ``<= batch_bins``, and the count limit); each utterance is cut to the shortest of
        its batch (sorting keeps the cut small), so what is computed is at most the budget.  An
        utterance over the budget alone is a batch of its own.

        Returns:
            ``(B, T, ...)`` tensors (``T_samples`` or ``T_frames`` along dim 1).
        """
        utts = sorted(self._utts, key=lambda u: int(u.shape[0]))
        groups: List[List[torch.Tensor]] = []
        for utt in utts:
            if groups and budget.fits(len(groups[-1]) + 1, utt):
                groups[-1].append(utt)
            else:
                groups.append([utt])
        return [torch.stack([u[: group[0].shape[0]] for u in group]) for group in groups]

    @torch.no_grad()
    def restat(self, encode: Callable[[torch.Tensor, torch.Tensor], object], batchnorms: Sequence[_BatchNorm],
               budget: RestatBudget, device: Optional[torch.device] = None,
               blocks: Optional[Sequence[torch.nn.Module]] = None) -> int:
        """Set each layer's running mean and variance to its input statistics over the sample.

        The sample is encoded in padding-free batches inside ``budget`` (:meth:`batches`), so no
        padding frame enters the statistics and no batch is larger than the run's evaluation
        budget, by ``encode(speech (B, T, ...), speech_lengths (B,))``, which
        must run the model in evaluation mode (standard frame rate, no dropout, no
        SpecAugment).  Each batch is moved to ``device`` (default: the sample's, host) only for
        its own forward.  One pass per layer, in the order the layers run, each pass ending at its
        layer; so a layer is measured with every earlier layer already re-estimated, as
        evaluation will see it.  Under ``torch.distributed`` the sums are added over all ranks
        first (every rank must call this, as every rank validates).

        Per layer, over all frames ``x_f`` (``C`` channels) of the sample::

            running_mean = Σ x_f / n,   running_var = (Σ x_f² − n · mean²) / (n − 1)

        (PyTorch's BatchNorm keeps the unbiased variance).  ``num_batches_tracked`` is unchanged.

        With ``blocks`` (the encoder's blocks in order, :func:`encoder_blocks`) the same statistics
        cost about one encoder pass instead of one pass per layer: every layer must sit in a
        block, and each block must take exactly the previous block's output (checked on the
        first batch: the output's tensors are the next block's arguments, no keyword
        arguments, as ESPnet's ``MultiSequential`` and encoder loops without interCTC
        conditioning call them).  Then the inputs of the first block that holds a layer are kept
        for every batch (on ``device``, as large as one pass of the sample through a block),
        each of that block's layers is measured by running the block alone on them, and the
        block's outputs, with its layers re-estimated, become the next block's inputs.  The
        layers see exactly the tensors of the pass-per-layer method, so the statistics are
        identical.  Otherwise the pass-per-layer method runs.

        Returns:
            The number of BatchNorm layers re-estimated (0 with an empty sample or no layers).
        """
        if not self._kept or not batchnorms:
            return 0
        start = time.perf_counter()
        batches = self.batches(budget)

        def run(speech: torch.Tensor) -> None:
            speech = speech.to(device, non_blocking=True) if device is not None else speech
            lengths = torch.full((speech.shape[0],), speech.shape[1], dtype=torch.long, device=speech.device)
            try:
                encode(speech, lengths)
            except _LayerDone:
                pass

        order, calls = self._trace(run, batches[0], batchnorms, blocks or [])
        chain = self._block_chain(order, blocks, calls) if blocks else None
        del calls  # the traced batch's block inputs and outputs
        if chain is None:
            for layer in order:  # one pass per layer, each ending at its layer
                self._set_statistics(layer, lambda: [run(speech) for speech in batches])
        else:
            first, last, layers_of = chain
            inputs = [self._block_inputs(run, speech, blocks[first]) for speech in batches]
            for k in range(first, last + 1):
                block = blocks[k]
                for layer in layers_of.get(k, []):
                    self._set_statistics(layer, lambda: [self._run_to_layer(block, args) for args in inputs])
                if k < last:
                    inputs = [block(*args) for args in inputs]  # the next block's arguments
        logging.info(
            "BatchNorm statistics of %d layers re-estimated at the standard frame rate over %d training "
            "utterances (%d input values, cost %d of %d, %d batches within %s; %s) in %.1f s",
            len(order), len(self), sum(int(b.numel()) for b in batches), self._total,
            budget.sample_capacity(self.num_batches), len(batches), budget,
            "block by block" if chain is not None else "one pass per layer", time.perf_counter() - start,
        )
        return len(order)

    @staticmethod
    def _set_statistics(layer: _BatchNorm, passes: Callable[[], object]) -> None:
        """Run ``passes`` (forwards that reach ``layer``, each ended there) and set the layer's
        running mean and variance to its inputs' frame-weighted statistics (:meth:`restat`)."""
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
            passes()
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

    @staticmethod
    def _run_to_layer(block: torch.nn.Module, args: tuple) -> None:
        try:
            block(*args)
        except _LayerDone:
            pass

    @staticmethod
    def _block_inputs(run: Callable[[torch.Tensor], None], speech: torch.Tensor, block: torch.nn.Module) -> tuple:
        """The positional arguments ``block`` receives when ``speech`` is encoded (the pass ends there)."""
        kept: List[tuple] = []

        def keep(_module, args):
            kept.append(args)
            raise _LayerDone

        handle = block.register_forward_pre_hook(keep)
        try:
            run(speech)
        finally:
            handle.remove()
        return kept[0]

    @staticmethod
    def _block_chain(order: Sequence[_BatchNorm], blocks: Sequence[torch.nn.Module],
                     calls: Sequence[list]) -> Optional[tuple]:
        """``(first, last, {block index: its layers in order})`` when every layer of ``order`` sits in
        one of ``blocks`` and, in the traced pass (``calls``: ``[block index, args, kwargs, output]``
        per block call, :meth:`_trace`), each block from the first to the last of them ran once and
        took exactly the previous one's output as its only arguments; else ``None``."""
        layers_of: Dict[int, List[_BatchNorm]] = {}
        for layer in order:
            owner = [k for k, block in enumerate(blocks) if any(m is layer for m in block.modules())]
            if len(owner) != 1:
                return None
            layers_of.setdefault(owner[0], []).append(layer)
        first, last = min(layers_of), max(layers_of)
        calls = [c for c in calls if first <= c[0] <= last]
        if [c[0] for c in calls] != list(range(first, last + 1)) or any(c[2] for c in calls):
            return None
        for (_, _, _, out), (_, args, _, _) in zip(calls, calls[1:]):
            if not isinstance(out, tuple) or len(out) != len(args) or any(o is not a for o, a in zip(out, args)):
                return None
        return first, last, layers_of

    @staticmethod
    def _trace(run: Callable[[torch.Tensor], None], speech: torch.Tensor, batchnorms: Sequence[_BatchNorm],
               blocks: Sequence[torch.nn.Module]) -> tuple:
        """One pass of ``speech``: the layers in the order it reaches them (a layer the encoder
        never reaches keeps its statistics), and each call of ``blocks`` as ``[block index, args,
        kwargs, output]``."""
        seen: List[_BatchNorm] = []
        calls: List[list] = []
        handles = [bn.register_forward_pre_hook(lambda m, _i: seen.append(m) if m not in seen else None)
                   for bn in batchnorms]
        for k, block in enumerate(blocks):
            def pre(_module, args, kwargs, k=k):
                calls.append([k, args, kwargs, None])

            def post(_module, _args, output, k=k):
                calls[-1][3] = output

            handles += [block.register_forward_pre_hook(pre, with_kwargs=True), block.register_forward_hook(post)]
        try:
            run(speech)
        finally:
            for h in handles:
                h.remove()
        return seen, calls


def restat_from_data_dir(model: torch.nn.Module, budget: RestatBudget, data_dir, num_batches: int,
                         seed: int = 0) -> int:
    """Re-estimate a trained ``model``'s BatchNorm statistics offline, as the plugin's models do
    before each evaluation, over a sample of a Kaldi-style data directory.

    The sample is :class:`BatchNormRestat` ``(num_batches, seed)`` over every utterance of
    ``data_dir/wav.scp`` (raw audio, read with ``soundfile`` as float32 ``(T_samples,)`` or
    ``(T_samples, C)``, at the sampling rate the model was trained at), or of
    ``data_dir/feats.scp`` when there is no ``wav.scp`` (extracted features ``(T_frames, D)``, read
    with ``kaldiio``), offered one utterance at a time in an order shuffled with ``seed``; only the
    budgeted sample stays in memory, on the host; each batch is moved to the model's device for its
    own forward.  It is encoded in evaluation mode (``model.eval()``: the
    evaluation frame rate of a ``frontend: dynres``, no dropout, no SpecAugment) one utterance per
    batch.

    Args:
        model: an ESPnet ASR model with ``encode(speech, speech_lengths)``.
        budget: the run's evaluation budget (``espnet_dynres.glue.build_model.restat_budget``).
        data_dir: the training data directory (``wav.scp`` or ``feats.scp``).
        num_batches: the sample's size in evaluation budgets (``batchnorm_restat_batches``).
        seed: seed of the order and of the sample's keys.

    Returns:
        The number of BatchNorm layers re-estimated.

    Raises:
        ValueError: neither ``wav.scp`` nor ``feats.scp`` in ``data_dir``; a blank line, a repeated
            utterance or an utterance without a path; a file that cannot be read (each names the
            file, the utterance and the fix).
    """
    data_dir = Path(data_dir)
    scp = data_dir / "wav.scp"
    if not scp.exists():
        scp = data_dir / "feats.scp"
    if not scp.exists():
        raise ValueError(f"{data_dir} holds neither wav.scp nor feats.scp; give the training data directory "
                         "of the run (e.g. dump/raw/train)")
    if scp.name == "wav.scp":
        import soundfile

        def load(path: str):
            return soundfile.read(path, dtype="float32")[0]  # (T_samples,) or (T_samples, C)
    else:
        import kaldiio

        def load(path: str):
            return kaldiio.load_mat(path).astype("float32")  # (T_frames, D)

    entries = list(read_keyed_file(scp).items())
    random.Random(seed).shuffle(entries)
    sample = BatchNormRestat(num_batches, seed=seed)
    for utt, path in entries:
        if not path:
            raise ValueError(f"{scp}: utterance {utt} has no path; fix or remove that line")
        try:
            data = torch.from_numpy(load(path))
        except Exception as exc:  # soundfile/kaldiio raise their own types
            raise ValueError(f"{scp}: cannot read utterance {utt} from {path} ({exc}); fix the path or the file") from exc
        sample.add(data[None], torch.tensor([data.shape[0]]), budget)
    model.eval()
    device = next(model.parameters()).device  # each batch of the host-held sample goes where the model is
    return sample.restat(model.encode, batchnorm_layers(model), RestatBudget(max_batch_size=1), device=device,
                         blocks=encoder_blocks(model))

