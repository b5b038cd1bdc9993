"""BatchNorm statistics re-estimated at the standard frame rate (``docs/training_dynamics.md``).

Called before every validation by :class:`~espnet_dynres.glue.trainer.DynResTrainer` (and by
``python -m espnet_dynres.bin.reestimate_batchnorm``) on a :class:`~espnet_dynres.asr.batchnorm_sample.BatchNormSample`.
The estimate is "precise BatchNorm" (Wu & Johnson, "Rethinking 'Batch' in BatchNorm", 2021, §3).
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
    """The blocks of an ESPnet encoder (``model.encoder.encoders``), in order, or ``None``."""
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

    ``model`` (with ``encode(speech, speech_lengths)``) is left in evaluation mode; the sample is encoded in
    padding-free batches inside ``budget``, layers measured in the order they run (block by block with
    ``block_by_block`` where :func:`_block_chain` allows).  With ``all_reduce`` (DDP) the sums are added over all
    ranks (every rank must call this).  ``num_batches_tracked`` is unchanged.  Per layer, over all frames ``x_f``::

        running_mean = Σ x_f / n,   running_var = (Σ x_f² − n · mean²) / (n − 1)

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
    logging.info("BatchNorm statistics of %d layers re-estimated at the standard frame rate over %d training "
                 "utterances (%d input values, cost %d of %d, %d batches within %s; %s) in %.1f s",
                 len(order), len(sample), sum(int(b.numel()) for b in batches), sample.total_cost,
                 budget.sample_capacity(sample.num_batches), len(batches), budget,
                 "block by block" if chain is not None else "one pass per layer", time.perf_counter() - start)
    return len(order)


def _set_statistics(layer: _BatchNorm, passes: Callable[[], object],
                    all_reduce: Optional[Callable[[torch.Tensor], None]]) -> None:
    """Run ``passes`` (each ended at ``layer``) and set its statistics (:func:`reestimate_batchnorm`)."""
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
    """``(first, last, {block index: its layers})`` when every layer sits in one block and each block from first
    to last ran once in ``calls`` (:func:`_trace`) on exactly the previous one's output; else ``None``."""
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
    """One pass of ``speech``: the layers in the order reached, each block call as ``[k, args, kwargs, output]``."""
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
