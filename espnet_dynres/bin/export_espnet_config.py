"""``python -m espnet_dynres.bin.export_espnet_config``: a config that stock ESPnet decodes with.

Rewrites a run's ``config.yaml`` with ESPnet's names (:func:`espnet_dynres.glue.stock_config.stock_espnet_config`) so
that ``espnet2.bin.asr_inference`` and ``espnet_model_zoo`` decode its checkpoints without the plugin, and copies the
``global_mvn`` statistics beside it as ``feats_stats.npz``::

    python -m espnet_dynres.bin.export_espnet_config --exp_dir exp/asr_train_asr_conformer_dynres_cpu
    python -m espnet_dynres.bin.export_espnet_config --config exp/x/config.yaml --out config_espnet.yaml"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import List, Optional

import yaml

from espnet_dynres.glue.stock_config import stock_espnet_config


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m espnet_dynres.bin.export_espnet_config", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exp_dir", type=Path, help="experiment dir: reads config.yaml, writes config_espnet.yaml there")
    p.add_argument("--config", type=Path, help="a training config.yaml (instead of --exp_dir)")
    p.add_argument("--out", type=Path, help="where to write (default: config_espnet.yaml beside the input)")
    args = p.parse_args(argv)
    if (args.exp_dir is None) == (args.config is None):
        p.error("give --exp_dir or --config")
    source = args.config or args.exp_dir / "config.yaml"
    if not source.exists():
        p.error(f"{source} does not exist")
    out = args.out or source.parent / "config_espnet.yaml"
    config = yaml.safe_load(source.read_text(encoding="utf-8"))
    out.write_text(yaml.safe_dump(stock_espnet_config(config), sort_keys=False), encoding="utf-8")
    print(f"export_espnet_config: wrote {out} (stock ESPnet names; decode with python -m espnet2.bin.asr_inference)")
    stats = (config.get("normalize_conf") or {}).get("stats_file")
    if stats is not None and Path(stats).is_file():
        shutil.copy2(stats, out.parent / "feats_stats.npz")  # beside the config, asr_inference finds it anywhere
        print(f"export_espnet_config: copied {stats} to {out.parent / 'feats_stats.npz'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
