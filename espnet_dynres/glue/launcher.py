"""``espnet_dynres_python``: ``python`` (``-m``/``-c``/script, ``-u``/``-B``/``-W``) that registers the plugin first."""

from __future__ import annotations

import runpy
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    while argv and argv[0] in ("-u", "-B", "-W"):
        flag = argv.pop(0)
        if flag == "-W" and argv:
            argv.pop(0)
    if not argv:
        sys.exit("usage: espnet_dynres_python (-m module | -c code | script.py) [args ...]")

    if argv[0] == "-m" and len(argv) >= 2:
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c" and len(argv) >= 2:
        sys.argv = ["-c"] + argv[2:]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
