"""BatchNorm statistics re-estimated at the standard frame rate: the one function that does it.

Why (measured in ``docs/training_dynamics.md``, "BatchNorm statistics at the standard rate"):
a BatchNorm layer (the Conformer's convolution module has one per block) normalises with the
statistics of its training batch, and keeps an exponential moving average of them (``momentum``
0.1 over the last ~10 training batches) for evaluation.  Under ``batch_type: dynres`` those
batches run at 70–130 Hz (or lower with ``target_frame_rate_hz``) with dropout on, while
validation and decoding run at the standard rate (100 Hz) with dropout off, so the averaged
statistics are those of other inputs than the ones evaluation normalises.  Training keeps a uniform
sample of the epoch's training utterances (:class:`~espnet_dynres.asr.batchnorm_sample.BatchNormSample`),
and before every validation the plugin's trainer
(:class:`~espnet_dynres.glue.trainer.DynResTrainer`) calls :func:`reestimate_batchnorm`, which
replaces every BatchNorm layer's running mean and variance with the exact frame-weighted
statistics of that layer's input over the sample, encoded in evaluation mode at the standard
rate; the offline tool ``python -m espnet_dynres.bin.reestimate_batchnorm`` calls the same
function.  ``model.eval()`` only switches the mode.  Training
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

import logging
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from espnet_dynres.asr.batchnorm_sample import BatchNormSample, RestatBudget


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


@torch.no_grad()
def reestimate_batchnorm(model: torch.nn.Module, sample: BatchNormSample, budget: RestatBudget,
                         all_reduce: Optional[Callable[[torch.Tensor], None]] = None,
                         block_by_block: bool = True) -> int:
    """Set each BatchNorm layer's running mean and variance to its input statistics over ``sample``.

    ``model`` (an ESPnet ASR model with ``encode(speech, speech_lengths)``) is put in evaluation
    mode (``model.eval()``: standard frame rate, no dropout, no SpecAugment) and left in it.  The
    sample is encoded in padding-free batches inside ``budget`` (:meth:`BatchNormSample.batches`),
    so no padding frame enters the statistics and no batch is larger than the run's evaluation
    budget.  Each batch is moved to the model's device only for its own forward.  One pass per
    layer, in the order the layers run, each pass ending at its layer; so a layer is measured with
    every earlier layer already re-estimated, as evaluation will see it.  With ``all_reduce`` (the
    trainer's ``torch.distributed.all_reduce`` under DDP) the sums are added over all ranks first
    (every rank must call this with its own sample).

    Per layer, over all frames ``x_f`` (``C`` channels) of the sample::

        running_mean = Σ x_f / n,   running_var = (Σ x_f² − n · mean²) / (n − 1)

    (PyTorch's BatchNorm keeps the unbiased variance).  ``num_batches_tracked`` is unchanged.

    With the encoder's blocks (:func:`encoder_blocks`) the same statistics cost about one encoder
    pass instead of one pass per layer: every layer must sit in a block, and each block must take
    exactly the previous block's output (checked on the first batch: the output's tensors are the
    next block's arguments, no keyword arguments, as ESPnet's ``MultiSequential`` and encoder
    loops without interCTC conditioning call them).  Then the inputs of the first block that holds
    a layer are kept for every batch (on the device, as large as one pass of the sample through a
    block), each of that block's layers is measured by running the block alone on them, and the
    block's outputs, with its layers re-estimated, become the next block's inputs.  The layers see
    exactly the tensors of the pass-per-layer method, so the statistics are identical.  Otherwise
    the pass-per-layer method runs (also with ``block_by_block=False``, the reference the tests
    compare with).

    Returns:
        The number of BatchNorm layers re-estimated (0 with an empty sample or no layers).
    """
    model.eval()
    batchnorms = batchnorm_layers(model)
    if len(sample) == 0 or not batchnorms:
        return 0
    start = time.perf_counter()
    device = next(model.parameters()).device
    blocks = encoder_blocks(model) if block_by_block else None
    batches = sample.batches(budget)

    def run(speech: torch.Tensor) -> None:
        speech = speech.to(device, non_blocking=True)
        lengths = torch.full((speech.shape[0],), speech.shape[1], dtype=torch.long, device=speech.device)
        try:
            model.encode(speech, lengths)
        except _LayerDone:
            pass

    order, calls = _trace(run, batches[0], batchnorms, blocks or [])
    chain = _block_chain(order, blocks, calls) if blocks else None
    del calls  # the traced batch's block inputs and outputs
    if chain is None:
        for layer in order:  # one pass per layer, each ending at its layer
            _set_statistics(layer, lambda: [run(speech) for speech in batches], all_reduce)
    else:
        first, last, layers_of = chain
        inputs = [_block_inputs(run, speech, blocks[first]) for speech in batches]
        for k in range(first, last + 1):
            block = blocks[k]
            for layer in layers_of.get(k, []):
                _set_statistics(layer, lambda: [_run_to_layer(block, args) for args in inputs], all_reduce)
            if k < last:
                inputs = [block(*args) for args in inputs]  # the next block's arguments
    logging.info(
        "BatchNorm statistics of %d layers re-estimated at the standard frame rate over %d training "
        "utterances (%d input values, cost %d of %d, %d batches within %s; %s) in %.1f s",
        len(order), len(sample), sum(int(b.numel()) for b in batches), sample.total_cost,
        budget.sample_capacity(sample.num_batches), len(batches), budget,
        "block by block" if chain is not None else "one pass per layer", time.perf_counter() - start,
    )
    return len(order)


def _set_statistics(layer: _BatchNorm, passes: Callable[[], object],
                    all_reduce: Optional[Callable[[torch.Tensor], None]]) -> None:
    """Run ``passes`` (forwards that reach ``layer``, each ended there) and set the layer's
    running mean and variance to its inputs' frame-weighted statistics (:func:`reestimate_batchnorm`)."""
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
    if all_reduce is not None:
        for t in (s, ss, n):
            all_reduce(t)
    mean = s / n
    var = (ss - n * mean * mean).clamp_min(0.0) / (n - 1).clamp_min(1.0)
    layer.running_mean.copy_(mean.to(layer.running_mean.dtype))
    layer.running_var.copy_(var.to(layer.running_var.dtype))

def _run_to_layer(block: torch.nn.Module, args: tuple) -> None:
    try:
        block(*args)
    except _LayerDone:
        pass

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

def _block_chain(order: Sequence[_BatchNorm], blocks: Sequence[torch.nn.Module],
                 calls: Sequence[list]) -> Optional[tuple]:
    """``(first, last, {block index: its layers in order})`` when every layer of ``order`` sits in
    one of ``blocks`` and, in the traced pass (``calls``: ``[block index, args, kwargs, output]``
    per block call, :func:`_trace`), each block from the first to the last of them ran once and
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
