"""Global per-token normalization under DDP: 2 CPU processes (gloo) versus one process.

Each rank runs ESPnet 202511's exact training-step arithmetic
(``espnet2/train/trainer.py``): ``loss = (loss * weight).sum()``,
``recursive_average(stats, weight, distributed=True)``, ``loss /= weight``,
``loss *= world_size``, then DDP averages the gradients over ranks.  The batch
is split as ESPnet splits it (``batch[rank::world_size]``), with one
CTC-infeasible utterance and one empty transcript on different ranks so that
the ranks' token counts differ.  The model's weight ``n`` (the batch's target
tokens) makes the trainer's weighted mean the global per-token mean with no
extra communication; the same run with ESPnet's weight (the batch size) does
not, which shows the test can fail.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from factory import build_tiny_model, deterministic_model_overrides, pad_batch, real_utterances

pytestmark = pytest.mark.slow  # two processes (gloo)

WORLD_SIZE = 2
MODEL_CONF = dict(ctc_weight=0.3, lsm_weight=0.1)


def global_batch():
    """6 real utterances; utt 0 is CTC-infeasible (0.4 s, 14 tokens), utt 3 has an empty transcript."""
    wavs = [w for c in (1, 2, 3) for w in real_utterances(2, concat=c, start=60 * c)]
    # All but utt 0 cut to one length, so that every shard is padded to the same length as the whole
    # batch (DefaultFrontend's STFT reflects at the end of the padded tensor, not of each utterance).
    length = min(len(w) for w in wavs[1:])
    wavs = [w[:length] for w in wavs]
    wavs[0] = wavs[0][:6400]  # 0.4 s -> 41 frames -> 9 encoder frames < 14 tokens
    token_rows = [
        [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 2, 3, 4, 5],
        [3, 3, 4],
        [5, 6, 7, 8],
        [],
        [2, 4, 6, 8, 10],
        [11, 10, 9, 9, 8, 7, 6],
    ]
    speech, speech_lengths = pad_batch(wavs)
    text_lengths = torch.tensor([len(r) for r in token_rows], dtype=torch.long)
    text = torch.full((len(token_rows), int(text_lengths.max())), -1, dtype=torch.long)
    for b, row in enumerate(token_rows):
        text[b, : len(row)] = torch.tensor(row, dtype=torch.long)
    return dict(speech=speech, speech_lengths=speech_lengths, text=text, text_lengths=text_lengths)


def shard(batch, rank: int, world_size: int):
    """ESPnet's split ``batch[rank::world_size]``, re-padded to the shard's own maxima (as its collate does)."""
    out = {k: v[rank::world_size].clone() for k, v in batch.items()}
    out["speech"] = out["speech"][:, : int(out["speech_lengths"].max())]
    out["text"] = out["text"][:, : max(int(out["text_lengths"].max()), 1)]
    return out


def flat_grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() if p.grad is not None else torch.zeros(p.numel()) for p in model.parameters()])


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    from espnet2.torch_utils.recursive_op import recursive_average

    import espnet_dynres  # noqa: F401  (registers model: token_normalized in this process)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD_SIZE)
    batch = shard(global_batch(), rank, WORLD_SIZE)
    for tokens_weight in (True, False):
        model = build_tiny_model(**deterministic_model_overrides(**MODEL_CONF)).train()
        ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
        loss, stats, weight = ddp(**{k: v.clone() for k, v in batch.items()})
        if not tokens_weight:  # ESPnet's own weight: the utterances of this rank's batch
            weight = torch.tensor([float(batch["speech"].size(0))])
        # espnet2/train/trainer.py, train_one_epoch, distributed branch (accum_grad = 1):
        loss = (loss * weight.type(loss.dtype)).sum()
        stats = {k: v for k, v in stats.items() if v is not None}
        stats, weight = recursive_average(stats, weight, True)
        loss /= weight
        loss *= dist.get_world_size()
        loss.backward()
        if rank == 0:
            torch.save(
                dict(grads=flat_grads(model), stats={k: float(v) for k, v in stats.items()}),
                os.path.join(out_dir, f"rank0_tokens{int(tokens_weight)}.pt"),
            )
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(str(tmp / "init"), str(tmp)), nprocs=WORLD_SIZE, join=True)
    return {w: torch.load(tmp / f"rank0_tokens{int(w)}.pt") for w in (True, False)}


@pytest.fixture(scope="module")
def single_process():
    """The whole batch in one process: ESPnet's non-distributed step uses the returned loss as is."""
    model = build_tiny_model(**deterministic_model_overrides(**MODEL_CONF)).train()
    loss, stats, _ = model(**global_batch())
    loss.backward()
    return dict(grads=flat_grads(model), stats={k: float(v) for k, v in stats.items() if v is not None})


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_two_rank_gradients_equal_whole_batch_gradients(ddp_results, single_process):
    ddp = ddp_results[True]
    assert single_process["stats"]["ctc_infeasible"] == 1 and single_process["stats"]["empty_transcripts"] == 1
    error = relative_error(ddp["grads"], single_process["grads"])
    print(f"2-rank vs 1-process gradient relative error: {error:.2e}")  # shown with pytest -s
    assert error <= 1e-5
    # The reported (token-weighted, all-ranks) loss stats are the whole batch's.
    for key in ("loss", "loss_ctc", "loss_att"):
        assert ddp["stats"][key] == pytest.approx(single_process["stats"][key], rel=1e-5), key


def test_batch_size_weight_is_not_the_global_per_token_mean(ddp_results, single_process):
    # The ranks' token counts differ, so weighting the ranks' per-token means by their
    # batch sizes (ESPnet's weight) does not give the global per-token mean.
    error = relative_error(ddp_results[False]["grads"], single_process["grads"])
    print(f"with the batch size as weight: gradient relative error {error:.2e}")
    assert error > 1e-3
