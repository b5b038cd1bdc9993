"""Readers of Kaldi-style ``key value`` tables (``wav.scp``, ``text``) and ESPnet shape files, each error naming the
file, the line and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple, Union

import numpy as np


def blank_line_message(path: Union[str, Path], line_no: int) -> str:
    """The error for a blank line in a Kaldi-style file (ESPnet's readers stop on it without naming it)."""
    return (f"{path}:{line_no}: blank line. ESPnet's data loaders stop on it with 'not enough values to unpack' "
            f"(no file or line named); delete it, e.g. sed -i '/^[[:space:]]*$/d' {path}")


def read_keyed_file(path: Union[str, Path]) -> Dict[str, str]:
    """A Kaldi-style ``key value`` file as a dict (value ``""`` for a key alone on its line).

    Raises:
        ValueError: a blank line or a repeated key (naming the file and line).
    """
    table: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            parts = line.rstrip("\n").split(maxsplit=1)
            if not parts:
                raise ValueError(blank_line_message(path, line_no))
            if parts[0] in table:
                raise ValueError(f"{path}:{line_no}: key {parts[0]} appears twice; keep one line per utterance.")
            table[parts[0]] = parts[1] if len(parts) > 1 else ""
    return table


def read_speech_lengths(shape_files: Sequence[str]) -> Dict[str, int]:
    """Samples per utterance (``{utt_id: N}``) from the first of ``shape_files``, which must all list the same keys.

    Raises:
        ValueError: a blank or malformed line, a repeated key or an empty file (:func:`read_shape_file`).
        RuntimeError: no shape file, or keys differing between shape files (naming up to 5 missing on each side).
    """
    if len(shape_files) == 0:
        raise RuntimeError("batch_type dynres needs at least one shape file (speech_shape)")
    keys, lengths = read_shape_file(shape_files[0])
    first = dict(zip(keys, lengths.tolist()))
    for path in shape_files[1:]:
        d = dict.fromkeys(read_shape_file(path)[0])  # other shape files: keys only
        if set(d) != set(first):
            missing = sorted(set(first) - set(d))[:5]
            extra = sorted(set(d) - set(first))[:5]
            raise RuntimeError(f"shape files disagree: {path} lacks {missing} and has extra {extra} "
                               f"compared with {shape_files[0]}; re-run collect-stats (stage 10) for this data dir.")
    return first


def read_shape_file(path: Union[str, Path]) -> Tuple[List[str], np.ndarray]:
    """``(keys, lengths)`` of an ESPnet shape file (``utt_id N[,D...]``) in one pass: ids, ``(N,)`` int64 first fields.

    Raises:
        ValueError: a blank or malformed line or a repeated key (naming the file and line), or an empty file.
    """
    keys: List[str] = []
    values: List[int] = []
    seen: Set[str] = set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split(maxsplit=1)
            if not parts:
                raise ValueError(blank_line_message(path, lineno))
            try:
                values.append(int(parts[1].split(",", 1)[0]))
            except (IndexError, ValueError):
                raise ValueError(
                    f"{path}:{lineno}: expected 'utt_id N[,D]' (an ESPnet shape file), got {line.rstrip()!r}"
                ) from None
            key = parts[0]
            if key in seen:
                raise ValueError(f"{path}:{lineno}: utterance {key} appears twice; rebuild the shape file")
            seen.add(key)
            keys.append(key)
    if not keys:
        raise ValueError(f"0 utterances in shape file {path}")
    return keys, np.asarray(values, dtype=np.int64)
