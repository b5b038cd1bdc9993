#!/usr/bin/env python3
"""Average chosen epochs' checkpoints of a run as ESPnet averages its n best, to decode a run at other epochs.

ESPnet's trainer averages the ``keep_nbest_models`` best epochs by ``best_model_criterion`` into
``valid.acc.ave.pth``.  To compare two protocols at the same training steps (short epochs 9, 12
and 15 of 169 steps against normal epochs 3, 4 and 5 of 507), this tool averages the epochs named
on the command line with ESPnet's own ``average_nbest_models`` (a reporter in which those epochs
rank first), so the arithmetic is ESPnet's: float parameters are averaged, integer buffers
(``num_batches_tracked``) summed.

Usage (checkpoints from ``<exp_dir>/epochs/`` where ``time_to_accuracy.py`` keeps every epoch's,
else ``<exp_dir>``)::

    python benchmarks/average_epochs.py --exp_dir exp/asr_sp15_SP_s0 --epochs 9 12 15 --out ave_9_12_15.pth
    (cd egs2/fsdd_digits/asr1 && ./run.sh --stage 12 --stop_stage 13 --asr_tag sp15_SP_s0 \\
        --inference_asr_model ave_9_12_15.pth ...)

``--out`` is relative to ``--exp_dir`` unless absolute.  Raises ``SystemExit`` naming a missing
checkpoint.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import List, Optional


def checkpoint(exp_dir: Path, epoch: int) -> Path:
    """``<exp_dir>/epochs/<epoch>epoch.pth``, else ``<exp_dir>/<epoch>epoch.pth``.

    Raises:
        SystemExit: neither exists (named).
    """
    for path in (exp_dir / "epochs" / f"{epoch}epoch.pth", exp_dir / f"{epoch}epoch.pth"):
        if path.exists():
            return path
    raise SystemExit(f"no checkpoint of epoch {epoch} in {exp_dir}/epochs or {exp_dir} "
                     "(ESPnet keeps only keep_nbest_models of them; time_to_accuracy.py copies every epoch's)")


def average_epochs(exp_dir: Path, epochs: List[int], out: Path) -> Path:
    """Write the average of ``epochs``' checkpoints of ``exp_dir`` to ``out``; returns ``out``."""
    from espnet2.main_funcs.average_nbest_models import average_nbest_models
    from espnet2.train.reporter import Reporter

    sources = {e: checkpoint(exp_dir, e) for e in sorted(set(epochs))}
    reporter = Reporter()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reporter has no stats of the epochs between those named
        for e, path in sources.items():
            (Path(tmp) / f"{e}epoch.pth").symlink_to(path.resolve())
            reporter.set_epoch(e)
            with reporter.observe("valid") as sub:  # every named epoch ranks first, alike
                sub.register({"acc": 1.0})
                sub.next()
        average_nbest_models(output_dir=Path(tmp), reporter=reporter, best_model_criterion=[("valid", "acc", "max")],
                             nbest=len(sources))
        out.parent.mkdir(parents=True, exist_ok=True)
        # a 1-best "average" is a symlink to the checkpoint: copy the data it points at
        shutil.copyfile(Path(tmp) / f"valid.acc.ave_{len(sources)}best.pth", out)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--exp_dir", type=Path, required=True, help="the run's experiment directory")
    p.add_argument("--epochs", type=int, nargs="+", required=True, help="the epochs to average")
    p.add_argument("--out", type=Path, required=True, help="output checkpoint (relative to --exp_dir)")
    args = p.parse_args(argv)
    out = args.out if args.out.is_absolute() else args.exp_dir / args.out
    print(average_epochs(args.exp_dir, args.epochs, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
