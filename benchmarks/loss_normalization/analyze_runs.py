#!/usr/bin/env python3
"""Loss-normalization study, part 3: per-step statistics and the figure of docs/loss_normalization.md.

Reads the two runs' ``train.log`` (written with ``log_interval: 1``, so every
training step has its own line with ESPnet's ``grad_norm`` — the total
gradient norm before clipping — and the losses) and, where decoded, their
``score/result.json``.

Both runs see the same batches in the same order (same shape files, same
``numel`` sampler, ESPnet shuffles batch order with ``seed + epoch``), so the
token_normalized run's per-step counts (``batch_tokens`` N, ``batch_size`` B)
also describe the default model's step.  That puts the default model's
per-utterance losses on the same per-token scale:
``(ctc_weight · loss_ctc + (1 − ctc_weight) · loss_att) · B / max(N, 1)``.
(Logs of the earlier loss definition, commit a8756e7, carry ``att_targets`` D
instead, with B = D − N and the attention term divided by D.)

Measured per run: coefficient of variation (std / mean) of the per-step
gradient norm, fraction of steps clipped, CV of the per-step per-token
training loss, the epoch-to-epoch change of the epoch-mean per-token training
loss, the correlation of the gradient norm with the batch's token count, the
validation curves and the test WER.

Usage:
    python benchmarks/loss_normalization/analyze_runs.py \\
        --espnet_dir egs2/fsdd_digits/asr1/exp/lossnorm_mixed/asr_train_asr_conformer_numel_espnet_cpu \\
        --token_normalized_dir egs2/fsdd_digits/asr1/exp/lossnorm_mixed/asr_train_asr_conformer_numel_token_normalized_cpu \\
        --ctc_weight 0.3 --figure docs/figures/loss_normalization_mixed_length.png --json lossnorm_summary.json
"""

from __future__ import annotations

import argparse
import glob
import json
import re
from pathlib import Path

import numpy as np

STEP_RE = re.compile(r"(\d+)epoch:train:(\d+)-(\d+)batch: (.*)$")
EPOCH_RE = re.compile(r"(\d+)epoch results: \[train\] (.*?)\[valid\] (.*?)(?:\[|$)")
KV_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(-?\d+(?:\.\d+)?(?:e[-+]\d+)?)")


def key_values(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in KV_RE.findall(text)}


def read_log(path: Path) -> tuple[list[dict], list[dict]]:
    """Per-step dicts (with ``epoch``) and per-epoch dicts (``train_*`` / ``valid_*``)."""
    steps, epochs = [], []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = STEP_RE.search(line)
        if m and m.group(2) == m.group(3):
            row = key_values(m.group(4))
            row["epoch"] = int(m.group(1))
            steps.append(row)
            continue
        m = EPOCH_RE.search(line)
        if m:
            row = {"epoch": int(m.group(1))}
            row.update({f"train_{k}": v for k, v in key_values(m.group(2)).items()})
            row.update({f"valid_{k}": v for k, v in key_values(m.group(3)).items()})
            epochs.append(row)
    if not steps:
        raise SystemExit(f"no per-step lines in {path}; train with log_interval: 1")
    return steps, epochs


def cv(x: np.ndarray) -> float:
    return float(np.std(x) / np.mean(x))


def test_score(exp_dir: Path) -> dict | None:
    found = sorted(glob.glob(str(exp_dir / "decode_*" / "test" / "score" / "result.json")))
    if not found:
        return None
    return json.loads(Path(found[-1]).read_text(encoding="utf-8")) | {"path": found[-1]}


def summarize(name: str, steps: list[dict], epochs: list[dict], per_token_loss: np.ndarray,
              tokens: np.ndarray, exp_dir: Path) -> dict:
    grad = np.array([s["grad_norm"] for s in steps])
    epoch_of = np.array([s["epoch"] for s in steps])
    later = epoch_of >= 2
    epoch_means = [float(np.mean(per_token_loss[epoch_of == e])) for e in sorted(set(epoch_of.tolist()))
                   if (epoch_of == e).sum() and e <= max(r["epoch"] for r in epochs)]
    return {
        "run": name,
        "steps": int(len(steps)),
        "epochs_completed": int(max(r["epoch"] for r in epochs)) if epochs else 0,
        "grad_norm_mean": float(grad.mean()),
        "grad_norm_cv_all_steps": cv(grad),
        "grad_norm_cv_epoch2_on": cv(grad[later]),
        "clipped_fraction_epoch2_on": float(np.mean(grad[later] > 5.0)),
        "grad_norm_vs_tokens_corr_epoch2_on": float(np.corrcoef(grad[later], tokens[later])[0, 1]),
        "per_token_loss_cv_epoch2_on": cv(per_token_loss[later]),
        "per_token_loss_epoch_means": epoch_means,
        "per_token_loss_mean_abs_epoch_change": float(np.mean(np.abs(np.diff(epoch_means)))) if len(epoch_means) > 1 else None,
        "loss_as_optimised_cv_epoch2_on": cv(np.array([s["loss"] for s in steps])[later]),
        "valid": [{k: r.get(k) for k in ("epoch", "valid_loss", "valid_acc", "valid_cer_ctc", "valid_cer", "valid_wer")}
                  for r in epochs],
        "test": test_score(exp_dir),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--espnet_dir", type=Path, required=True)
    ap.add_argument("--token_normalized_dir", type=Path, required=True)
    ap.add_argument("--ctc_weight", type=float, required=True, help="model_conf ctc_weight of both runs")
    ap.add_argument("--figure", type=Path, required=True)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    stock_steps, stock_epochs = read_log(args.espnet_dir / "train.log")
    tn_steps, tn_epochs = read_log(args.token_normalized_dir / "train.log")
    n = min(len(stock_steps), len(tn_steps))
    stock_steps, tn_steps = stock_steps[:n], tn_steps[:n]
    tokens = np.array([s["batch_tokens"] for s in tn_steps])
    lam = args.ctc_weight
    stock_ctc = np.array([s.get("loss_ctc", 0.0) for s in stock_steps])
    stock_att = np.array([s.get("loss_att", 0.0) for s in stock_steps])
    if "att_targets" in tn_steps[0]:  # the earlier definition (commit a8756e7)
        targets = np.array([s["att_targets"] for s in tn_steps])
        batch = targets - tokens
        stock_per_token = lam * stock_ctc * batch / np.maximum(tokens, 1) + (1 - lam) * stock_att * batch / targets
    else:
        batch = np.array([s["batch_size"] for s in tn_steps])
        stock_per_token = (lam * stock_ctc + (1 - lam) * stock_att) * batch / np.maximum(tokens, 1)
    tn_per_token = np.array([s.get("loss_per_token", s["loss"]) for s in tn_steps])

    epochs_done = min(len(stock_epochs), len(tn_epochs))
    summary = {
        "steps_compared": n,
        "espnet": summarize("espnet", stock_steps, stock_epochs[:epochs_done], stock_per_token, tokens, args.espnet_dir),
        "token_normalized": summarize("token_normalized", tn_steps, tn_epochs[:epochs_done], tn_per_token, tokens,
                                      args.token_normalized_dir),
        "batch_tokens": {"min": float(tokens.min()), "max": float(tokens.max()),
                         "batch_size_min": float(batch.min()), "batch_size_max": float(batch.max())},
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2), encoding="utf-8")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    x = np.arange(1, n + 1)
    colours = {"espnet": "tab:red", "token_normalized": "tab:blue"}
    for name, steps, per_token in (("espnet", stock_steps, stock_per_token), ("token_normalized", tn_steps, tn_per_token)):
        grad = np.array([s["grad_norm"] for s in steps])
        s = summary[name]
        ax[0, 0].semilogy(x, grad, lw=0.8, color=colours[name],
                          label=f"{name} (CV {s['grad_norm_cv_epoch2_on']:.2f} from epoch 2)")
        ax[0, 1].semilogy(x, per_token, lw=0.8, color=colours[name],
                          label=f"{name} (CV {s['per_token_loss_cv_epoch2_on']:.2f} from epoch 2)")
        ax[1, 0].loglog(tokens, grad, ".", ms=3, color=colours[name],
                        label=f"{name} (corr {s['grad_norm_vs_tokens_corr_epoch2_on']:.2f})")
        ep = [r["epoch"] for r in s["valid"]]
        ax[1, 1].plot(ep, [r["valid_cer_ctc"] for r in s["valid"]], "o-", color=colours[name],
                      label=f"{name}: valid CTC CER")
        ax[1, 1].plot(ep, [r["valid_acc"] for r in s["valid"]], "s--", color=colours[name],
                      label=f"{name}: valid attention acc")
    ax[0, 0].axhline(5.0, color="grey", ls=":", lw=1, label="grad_clip 5")
    ax[0, 0].set(xlabel="training step", ylabel="gradient norm (before clipping)", title="per-step gradient norm")
    ax[0, 1].set(xlabel="training step", ylabel="training loss per token (nats)",
                 title="per-step training loss, per-token scale")
    ax[1, 0].set(xlabel="target tokens in the batch", ylabel="gradient norm", title="gradient norm vs batch tokens")
    ax[1, 1].set(xlabel="epoch", ylabel="CER / accuracy", title="validation (100 Hz)")
    for a in ax.flat:
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    fig.suptitle("numel batches on mixed-length FSDD connected digits (0.4 s .. 81 s): ESPnet default loss vs token_normalized")
    fig.tight_layout()
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.figure, dpi=110)
    print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
