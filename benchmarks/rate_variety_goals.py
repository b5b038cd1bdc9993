#!/usr/bin/env python3
"""The rate-variety study's tables and goals, from its committed ``time_to_accuracy.json`` files.

The study (``docs/experiments/rate_variety_vs_speed_perturbation.md``) trains, per seed, ``A``
(``numel`` at 100 Hz), ``C`` (the main job), ``J`` / ``Jw`` (C with a drawn per-batch target rate),
``SP`` and ``CSP`` (A and C on the speed-perturbed set, 5 passes) and reads ``SP@C`` / ``CSP@C``
(their checkpoint nearest to C's training wall-clock), each in ``benchmarks/time_to_accuracy.py``
runs.  This script merges those runs (:func:`time_to_accuracy.merge_results`; each ``(arm, seed)``
once) and writes, as Markdown:

1. per arm and seed: test WER % on the clean set, the four tempo sets (pitch kept), the two speed
   sets (pitch moved), the mean of the four tempi and the mean of the six perturbed sets;
   training wall-clock (s, validation included) and encoder input frames up to the checkpoint;
2. per arm, the mean over seeds and the paired difference to ``A`` and to ``SP`` with its 95 %
   interval (:func:`time_to_accuracy.paired_difference`, Student's t over seeds);
3. the goals, per seed and in the mean (:func:`goals`):

   * *instead of SP, on tempo*: a variety arm ``X`` (``C``, ``J``, …) has a lower mean WER over the
     four tempi than ``SP@C`` (equal training wall-clock), and at most ``1 + tolerance`` times
     ``SP``'s (5 passes);
   * *on top of SP, for free*: ``CSP`` has a lower mean WER over the six perturbed sets than
     ``SP``, and a lower clean WER, at a training wall-clock of at most ``max_time_ratio`` times
     ``SP``'s (the two ran side by side, so their ratio is the one figure that compares);
   * *clean*: each variety arm's and ``CSP``'s clean test WER at most ``A``'s + ``clean_margin``
     points.

   A goal whose arms are not in the files is left out: ``SP`` and ``CSP`` alone (the
   speed-perturbation study at the standard protocol, ``--variety_arms`` with none) give the
   *on top of SP* goals.  In the mean, a goal is *met* when the mean over seeds satisfies it, and *shown* when the 95 %
   interval of the paired difference (or of the per-seed ratio) lies wholly on the right side;
4. a summary, one row per arm (:func:`summary_lines`, the README's results table): training steps,
   training wall-clock and time to the dev target as ratios to the arm that trained beside it
   (``--beside``; the time figures that compare), and test WER % as the mean over seeds with the
   per-seed range.

With ``--png`` it also draws the test WER per test set and arm (:func:`plot`).

Usage::

    python benchmarks/rate_variety_goals.py docs/experiments/data/rate_variety/seed*_*.json \\
        --png docs/figures/rate_variety_test_wer.png

Raises ``SystemExit`` naming a missing arm (``SP`` or ``CSP``) or seed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # time_to_accuracy.py, also when this file is imported by path
    sys.path.insert(0, str(HERE))
from time_to_accuracy import METRICS, first_reaching, merge_results, paired_difference, target_value  # noqa: E402

TEMPO_SETS = ["test_tempo0.8", "test_tempo0.9", "test_tempo1.1", "test_tempo1.25"]
SPEED_SETS = ["test_speed0.9", "test_speed1.1"]
COLUMNS = ["test"] + TEMPO_SETS + ["tempo_mean"] + SPEED_SETS + ["perturbed_mean"]
HEADINGS = {"test": "clean", "tempo_mean": "mean of the 4 tempi", "perturbed_mean": "mean of the 6 perturbed",
            **{s: s[len("test_"):].replace("tempo", "tempo ").replace("speed", "speed ") for s in TEMPO_SETS + SPEED_SETS}}
NAN = float("nan")
VALID_METRIC = "ter_ctc_token"  # valid CTC token error, the study's dev figure


def figures(entry: dict) -> Dict[str, float]:
    """One run's figures: test WER % per set (NaN where not scored), the two means (NaN unless every
    set of the mean is scored), ``wall_sec`` (training wall-clock at the evaluated checkpoint,
    validation included), ``train_sec`` (the same without validation; NaN where not logged) and
    ``encoder_frames`` (encoder input frames up to that checkpoint) and ``steps``;
    ``time_to_accuracy`` records them per epoch as totals since the start, so they are read from the
    checkpoint's epoch row.  ``valid_curve``: ``[(wall_sec, valid ter_ctc_token)]`` per epoch, empty
    for a run read at a checkpoint."""
    sets = entry.get("test_sets", {})
    out = {name: float(sets[name]["wer"]) if name in sets else NAN for name in ["test"] + TEMPO_SETS + SPEED_SETS}
    out["tempo_mean"] = sum(out[s] for s in TEMPO_SETS) / len(TEMPO_SETS)
    out["perturbed_mean"] = sum(out[s] for s in TEMPO_SETS + SPEED_SETS) / len(TEMPO_SETS + SPEED_SETS)
    last = entry.get("checkpoint_epoch") or max(r["epoch"] for r in entry["epochs"])
    row = next(r for r in entry["epochs"] if r["epoch"] == last)  # the epoch rows are cumulative
    out["wall_sec"] = float(row["wall_sec"])
    out["train_sec"] = float(row.get("train_sec", NAN))
    out["encoder_frames"] = float(row.get("encoder_input_frames", NAN))
    out["steps"] = float(row.get("steps", NAN))
    # the whole dev curve (not only up to the checkpoint), for the time to another arm's target;
    # none for a run read at a checkpoint (SP@C, CSP@C), which did not train towards one
    out["valid_curve"] = [] if entry.get("checkpoint_epoch") else [
        (float(r["wall_sec"]), float(r.get(VALID_METRIC, NAN))) for r in entry["epochs"]]
    return out


def time_to_target_ratio(curve: list, reference: list) -> float:
    """Wall-clock for ``curve`` to first reach the reference's valid target (the mean of its last two
    epochs' valid CTC token error, as ``time_to_accuracy --target_rule last_two_mean`` sets it) over
    the reference's own first time at it; both ``[(wall_sec, valid ter_ctc_token), ...]`` per epoch
    of two arms trained side by side.  NaN where either curve is empty or ``curve`` never reaches it."""
    if not curve or not reference:
        return NAN
    mode = METRICS[VALID_METRIC]  # lower is better, as time_to_accuracy reads it
    ref_values = [v for _, v in reference]
    target = target_value(ref_values, mode, "last_two_mean")
    i = first_reaching([v for _, v in curve], target, mode)
    return NAN if i is None else curve[i][0] / reference[first_reaching(ref_values, target, mode)][0]


def table_of(results: dict) -> Dict[str, Dict[int, Dict[str, float]]]:
    """``{arm: {seed: figures(entry)}}`` for every arm and seed of merged results."""
    return {arm: {int(s): figures(e) for s, e in seeds.items()} for arm, seeds in results["arms"].items()}


def _cell(d: dict, fmt: str = "+.2f") -> str:
    if not d["seeds"]:
        return "—"
    if d["seeds"] == 1:
        return f"{d['mean']:{fmt}}"
    return f"{d['mean']:{fmt}} [{d['low']:{fmt}}, {d['high']:{fmt}}]"


def per_seed_lines(table: dict) -> List[str]:
    lines = ["| arm | seed | " + " | ".join(HEADINGS[c] for c in COLUMNS) + " | training wall-clock (s) | encoder frames |",
             "|---|---|" + "---|" * (len(COLUMNS) + 2)]
    for arm, seeds in table.items():
        for seed, f in seeds.items():
            lines.append(f"| {arm} | {seed} | " + " | ".join("—" if math.isnan(f[c]) else f"{f[c]:.2f}" for c in COLUMNS)
                         + f" | {f['wall_sec']:,.0f} | {f['encoder_frames']:,.0f} |")
    return lines


def mean_lines(table: dict, references: List[str]) -> List[str]:
    """Mean over seeds per arm, then one row per reference arm with the paired difference arm − reference."""
    lines = ["| arm | " + " | ".join(HEADINGS[c] for c in COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for arm, seeds in table.items():
        cells = []
        for c in COLUMNS:
            known = [f[c] for f in seeds.values() if not math.isnan(f[c])]
            cells.append("—" if not known else f"{sum(known) / len(known):.2f} ({len(known)})")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        for ref in references:
            if ref == arm or ref not in table:
                continue
            common = [s for s in seeds if s in table[ref]]
            cells = [_cell(paired_difference([seeds[s][c] for s in common], [table[ref][s][c] for s in common]))
                     for c in COLUMNS]
            lines.append(f"| {arm} − {ref} | " + " | ".join(cells) + " |")
    return lines


def _require(table: dict, arms: List[str]) -> None:
    missing = [a for a in arms if a not in table]
    if missing:
        raise SystemExit(f"no run of arm(s) {missing} in the files given; merge their time_to_accuracy.json")


def goals(table: dict, variety_arms: List[str], tolerance: float = 0.10, max_time_ratio: float = 1.05,
          clean_margin: float = 0.3, a: str = "A", sp: str = "SP", sp_at: str = "SP@C", csp: str = "CSP") -> List[dict]:
    """The study's goals, per seed and in the mean over the seeds the arms of a goal share.

    Returns one dict per goal and arm: ``{"goal", "arm", "per_seed": {seed: (value, bound, met)},
    "mean": paired_difference(value, bound) (value − bound, or the ratio − the bound for the time
    goal), "met_in_mean", "shown"}``.  ``met`` means ``value < bound`` for the "better than" goals
    and ``value <= bound`` for the "at most" ones; it is ``None`` where a test set the goal needs
    was not scored in that seed (that seed is then left out of the mean).
    """
    _require(table, [sp, csp])
    rows: List[dict] = []

    def add(goal: str, arm: str, value, bound, strict: bool, ratio: bool = False, needs: tuple = (sp, csp)):
        seeds = sorted(s for s in table[arm] if all(s in table[x] for x in needs))
        vals = {s: value(s) for s in seeds}
        bounds = {s: bound(s) for s in seeds}
        per_seed = {s: (vals[s], bounds[s], None if math.isnan(vals[s] - bounds[s])  # a test set not scored
                        else vals[s] < bounds[s] if strict else vals[s] <= bounds[s]) for s in seeds}
        d = paired_difference([vals[s] for s in seeds], [bounds[s] for s in seeds])
        met = d["seeds"] > 0 and (d["mean"] < 0 if strict else d["mean"] <= 0)
        shown = d["seeds"] > 1 and (d["high"] < 0 if strict else d["high"] <= 0)
        rows.append({"goal": goal, "arm": arm, "per_seed": per_seed, "mean": d, "met_in_mean": met,
                     "shown": shown, "ratio": ratio})

    for x in variety_arms:
        if x not in table or sp_at not in table:
            continue
        add(f"tempi: {x} better than {sp_at} (equal wall-clock)", x,
            lambda s, x=x: table[x][s]["tempo_mean"], lambda s: table[sp_at][s]["tempo_mean"], True, needs=(x, sp_at))
        add(f"tempi: {x} within {tolerance:.0%} of {sp} (5 passes)", x,
            lambda s, x=x: table[x][s]["tempo_mean"], lambda s: (1 + tolerance) * table[sp][s]["tempo_mean"], False,
            needs=(x, sp))
    add(f"6 perturbed: {csp} better than {sp}", csp,
        lambda s: table[csp][s]["perturbed_mean"], lambda s: table[sp][s]["perturbed_mean"], True)
    add(f"clean: {csp} better than {sp}", csp, lambda s: table[csp][s]["test"], lambda s: table[sp][s]["test"], True)
    add(f"wall-clock {csp} / {sp} at most {max_time_ratio:.2f}×", csp,
        lambda s: table[csp][s]["wall_sec"] / table[sp][s]["wall_sec"], lambda s: max_time_ratio, False, ratio=True)
    if all(not math.isnan(table[x][s]["train_sec"]) for x in (sp, csp) for s in table[x]):
        add(f"(for reference) training time without validation {csp} / {sp} at most {max_time_ratio:.2f}×", csp,
            lambda s: table[csp][s]["train_sec"] / table[sp][s]["train_sec"], lambda s: max_time_ratio, False,
            ratio=True)
    for x in [*variety_arms, csp]:
        if x in table and a in table:
            add(f"clean: {x} at most {a} + {clean_margin:g}", x,
                lambda s, x=x: table[x][s]["test"], lambda s: table[a][s]["test"] + clean_margin, False, needs=(x, a))
    return rows


def goal_lines(rows: List[dict]) -> List[str]:
    seeds = sorted({s for r in rows for s in r["per_seed"]})
    lines = ["| goal | " + " | ".join(f"seed {s}: value / bound" for s in seeds)
             + " | mean: value − bound [95 %] | met in the mean | shown (interval) |",
             "|---|" + "---|" * (len(seeds) + 3)]
    for r in rows:
        fmt = ".3f" if r["ratio"] else ".2f"
        cells = []
        for s in seeds:
            if s not in r["per_seed"]:
                cells.append("—")
                continue
            v, b, met = r["per_seed"][s]
            cells.append(f"{v:{fmt}} / {b:{fmt}} {'not scored' if met is None else 'yes' if met else 'no'}")
        lines.append(f"| {r['goal']} | " + " | ".join(cells) + f" | {_cell(r['mean'], '+' + fmt)} | "
                     f"{'yes' if r['met_in_mean'] else 'no'} | "
                     f"{'yes' if r['shown'] else ('—' if r['mean']['seeds'] < 2 else 'no')} |")
    return lines


def markdown(table: dict, rows: List[dict], references: List[str], beside: Optional[Dict[str, str]] = None) -> str:
    return "\n".join(
        ["Per arm and seed: test WER %, training wall-clock and encoder input frames up to the evaluated checkpoint.", ""]
        + per_seed_lines(table)
        + ["", "Mean over seeds (seeds), and the paired difference arm − reference [95 % interval, Student's t].", ""]
        + mean_lines(table, references)
        + ["", "Goals: value / bound and met per seed; in the mean, the paired difference value − bound with its "
           "95 % interval (met: the mean on the right side; shown: the whole interval).", ""]
        + goal_lines(rows)
        + ["", "Summary: test WER % as the mean over seeds (per-seed range); time as the ratio to the arm "
           "trained beside it.", ""]
        + summary_lines(table, beside or {})) + "\n"


def _mean_range(values: List[float], fmt: str = ".2f") -> str:
    """``mean (low–high)`` over the values that are not NaN; ``—`` when none is."""
    known = [v for v in values if not math.isnan(v)]
    if not known:
        return "—"
    mean = f"{sum(known) / len(known):{fmt}}"
    return mean if len(known) == 1 else f"{mean} ({min(known):{fmt}}–{max(known):{fmt}})"


def summary_lines(table: dict, beside: Dict[str, str]) -> List[str]:
    """One row per arm: seeds; training steps (mean over seeds); training wall-clock and the time to the
    dev target of the arm it trained beside (``beside[arm]``), each as the per-seed ratio to that arm
    (:func:`time_to_target_ratio`, with the seeds that reached the target; ``—`` for a run read at a
    checkpoint); and test WER % as ``mean (per-seed range)``: clean, the mean of the four tempi, speed
    0.9 and 1.1, the mean of the six perturbed sets.  An arm that others trained beside is the
    reference (``1``); an arm with neither gets ``—``.  A ratio needs both arms in the same seed;
    other seeds are left out."""
    references = set(beside.values())
    lines = ["| arm | seeds | training steps | training wall-clock (× the arm beside it) "
             "| time to that arm's dev target (× its time) | clean | mean of the 4 tempi "
             "| speed 0.9 | speed 1.1 | mean of the 6 perturbed |", "|---|" + "---|" * 9]
    for arm, seeds in table.items():
        ref = beside.get(arm)
        if ref is not None and ref in table:
            common = [s for s in seeds if s in table[ref]]
            time = f"{_mean_range([seeds[s]['wall_sec'] / table[ref][s]['wall_sec'] for s in common], '.3f')} × {ref}"
            ratios = [time_to_target_ratio(seeds[s]["valid_curve"], table[ref][s]["valid_curve"]) for s in common]
            reached = [r for r in ratios if not math.isnan(r)]
            if not any(seeds[s]["valid_curve"] for s in common):
                to_target = "—"
            else:
                to_target = f"{_mean_range(reached)} ({len(reached)}/{len(ratios)} reached)" if reached else "not reached"
        elif arm in references:
            time = to_target = "1 (reference)"
        else:
            time = to_target = "—"
        steps = [f["steps"] for f in seeds.values() if not math.isnan(f["steps"])]
        cells = [_mean_range([f[c] for f in seeds.values()])
                 for c in ("test", "tempo_mean", "test_speed0.9", "test_speed1.1", "perturbed_mean")]
        lines.append(f"| {arm} | {len(seeds)} | {f'{sum(steps) / len(steps):,.0f}' if steps else '—'} | {time} | "
                     f"{to_target} | " + " | ".join(cells) + " |")
    return lines


def plot(table: dict, png: Path) -> None:
    """Test WER % per test set (x) and arm (bars: the mean over seeds; dots: each seed), log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = ["test"] + TEMPO_SETS + SPEED_SETS
    arms = list(table)
    width = 0.8 / max(len(arms), 1)
    fig, ax = plt.subplots(figsize=(13, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, arm in enumerate(arms):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(sets))]
        per_seed = [[f[name] for f in table[arm].values() if not math.isnan(f[name])] for name in sets]
        means = [sum(v) / len(v) if v else NAN for v in per_seed]
        colour = colours[k % len(colours)]
        ax.bar(xs, means, width=width, color=colour, alpha=0.75, label=f"{arm} ({len(table[arm])} seeds)")
        for x, v in zip(xs, per_seed):
            ax.plot([x] * len(v), [max(w, 0.1) for w in v], "o", color="black", ms=2.5)
    ax.set_xticks(range(len(sets)))
    ax.set_xticklabels([HEADINGS[name] for name in sets])
    ax.set_yscale("log")
    ax.set_ylabel("test WER % (0 drawn at 0.1)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=4)
    ax.set_title("test WER per test set: bars the mean over seeds, dots each seed "
                 "(tempo: pitch kept; speed: pitch moved)", fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("reports", type=Path, nargs="+", help="time_to_accuracy.json files of the study")
    p.add_argument("--variety_arms", nargs="*", default=["C", "J", "Jw"])
    p.add_argument("--references", nargs="+", default=["A", "SP"], help="arms of the paired differences")
    p.add_argument("--tolerance", type=float, default=0.10, help="relative slack against SP after 5 passes")
    p.add_argument("--max_time_ratio", type=float, default=1.05)
    p.add_argument("--clean_margin", type=float, default=0.3, help="WER points above A's clean test WER")
    p.add_argument("--beside", nargs="*", default=["C=A", "CSP=SP", "Jw=J", "SP@C=C", "CSP@C=C"],
                   metavar="ARM=REF", help="the arm each arm trained beside, for the summary's time ratio (SP@C "
                   "and CSP@C: C, whose wall-clock picked their checkpoint; they ran in another pair)")
    p.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    p.add_argument("--png", type=Path, default=None, help="also draw the test WER per set and arm here (plot)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    try:
        has_a = any("A" in json.loads(Path(f).read_text())["arms"] for f in args.reports)
        results = merge_results(args.reports, "A" if has_a else None, "last_two_mean")
    except ValueError as e:
        raise SystemExit(str(e))
    table = table_of(results)
    beside = {}
    for pair in args.beside:
        arm, sep, ref = pair.partition("=")
        if not sep or not arm or not ref:
            raise SystemExit(f"--beside {pair!r}: write ARM=REF, e.g. C=A")
        if arm in table and ref not in table:
            raise SystemExit(f"--beside {pair!r}: no run of arm {ref!r} in the files given (arms: {sorted(table)}); "
                             f"merge the time_to_accuracy.json of the pair {arm!r} trained in")
        beside[arm] = ref
    text = markdown(table, goals(table, args.variety_arms, args.tolerance, args.max_time_ratio, args.clean_margin),
                    args.references, beside)
    if args.out is not None:
        args.out.write_text(text)
    if args.png is not None:
        plot(table, args.png)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
