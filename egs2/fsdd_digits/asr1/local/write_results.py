#!/usr/bin/env python3
"""Stage 13: an experiment's RESULTS in ESPnet's format, from the scoring stage's ``result.json``.

Writes ``<exp>/RESULTS.md`` and, with ``--readme``, replaces that experiment's section of the
recipe README's RESULTS (between ``<!-- RESULTS BEGIN -->`` and ``<!-- RESULTS END -->``; other
experiments' sections stay).  The tables are ESPnet's (``|dataset|Snt|Wrd|Corr|Sub|Del|Ins|Err|S.Err|``,
percentages of the reference words or characters, ``S.Err`` of the sentences); the environment
line names the Python, ESPnet and PyTorch versions and the machine's cores.

Usage (from the recipe directory)::

    python local/write_results.py --exp exp/asr_x --decode_dir exp/asr_x/decode_y --sets test \\
        [--readme README.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
from pathlib import Path
from typing import Dict, List

BEGIN, END = "<!-- RESULTS BEGIN -->", "<!-- RESULTS END -->"


def row(name: str, r: Dict, unit: str) -> str:
    n = r[f"{unit}_ref_{'words' if unit == 'wer' else 'chars'}"]
    sub, dele, ins = r[f"{unit}_sub"], r[f"{unit}_del"], r[f"{unit}_ins"]
    pct = (lambda x: f"{100.0 * x / n:.1f}") if n else (lambda x: "0.0")
    corr = n - sub - dele
    return (f"|{name}|{r['num_utts']}|{n}|{pct(corr)}|{pct(sub)}|{pct(dele)}|{pct(ins)}|{pct(sub + dele + ins)}|"
            f"{r['ser']:.1f}|")


def environment() -> str:
    import espnet
    import torch

    return (f"- python version: `{platform.python_version()}`; espnet version: `espnet {espnet.__version__}`; "
            f"pytorch version: `pytorch {torch.__version__}`; machine: {os.cpu_count()} CPU cores "
            f"({platform.machine()}), no GPU")


def section(exp: Path, decode_dir: Path, sets: List[str]) -> str:
    results = {s: json.loads((decode_dir / s / "score" / "result.json").read_text(encoding="utf-8")) for s in sets}
    lines = [f"## {exp.name}", "", environment(), ""]
    for unit, title in (("wer", "WER"), ("cer", "CER (characters of each sentence, spaces removed)")):
        lines += [f"### {title}", "", "|dataset|Snt|Wrd|Corr|Sub|Del|Ins|Err|S.Err|", "|---|---|---|---|---|---|---|---|---|"]
        lines += [row(f"{decode_dir.name}/{s}", r, unit) for s, r in results.items()] + [""]
    return "\n".join(lines)


def update_readme(readme: Path, exp_name: str, text: str) -> None:
    """Replace (or add) the ``## <exp_name>`` section between the RESULTS markers."""
    content = readme.read_text(encoding="utf-8") if readme.exists() else f"# RESULTS\n\n{BEGIN}\n{END}\n"
    if BEGIN not in content or END not in content:
        content = content.rstrip("\n") + f"\n\n# RESULTS\n\n{BEGIN}\n{END}\n"
    head, rest = content.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    sections = [s for s in re.split(r"(?m)^(?=## )", body.strip("\n")) if s.strip()]
    sections = [s for s in sections if not s.startswith(f"## {exp_name}\n")] + [text]
    readme.write_text(f"{head}{BEGIN}\n" + "\n".join(s.rstrip("\n") + "\n" for s in sections) + f"{END}{tail}",
                      encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exp", type=Path, required=True)
    ap.add_argument("--decode_dir", type=Path, required=True)
    ap.add_argument("--sets", nargs="+", required=True)
    ap.add_argument("--readme", type=Path, default=None, help="the recipe README whose RESULTS to update")
    args = ap.parse_args(argv)
    text = section(args.exp, args.decode_dir, args.sets)
    (args.exp / "RESULTS.md").write_text("# RESULTS\n\n" + text, encoding="utf-8")
    if args.readme is not None:
        update_readme(args.readme, args.exp.name, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
