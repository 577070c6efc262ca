#!/usr/bin/env python3
"""The remat planner's time-memory curve: symtune-bench at several budgets, several rounds.

Runs `symtune-bench --modes script,checkpoint --budgets LIST` ROUNDS times (one process per round,
every mode of a model stepped in turn within it), then prints per model and mode the median over
the rounds of the throughput and the peak memory over `script` (each round's value beside it),
the budgets no plan fitted with the smallest budget each round named, and writes OUT/median.json:
the first round's JSON with every mode's ratios replaced by those medians, which
`symtune-bench-chart OUT/median.json OUT/curve.png` draws (the curve in each model's fourth chart).

    bench/python/remat_curve.py --out /tmp/remat --budgets 0.4,0.5,0.6,0.7,0.8 --rounds 3
"""

import argparse
import copy
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_round(bench: Path, out: Path, args) -> dict:
    command = [str(bench), "--preset", args.preset, "--modes", "script,checkpoint",
               "--budgets", args.budgets, "--steps", str(args.steps), "--warmup",
               str(args.warmup), "--output", str(out)]
    if args.models != "all":
        command += ["--models", args.models]
    log = out.with_suffix(".log")
    with log.open("w") as stderr:
        code = subprocess.call(command, stdout=subprocess.DEVNULL, stderr=stderr)
    if code != 0:
        raise RuntimeError(f"{' '.join(command)} exited {code} (see {log})")
    return json.loads(out.read_text())


def summarize(rounds: list) -> dict:
    """Per model and mode: the ratios of every round, their medians, and infeasible rounds."""
    table = {}
    for result in rounds:
        for model in result["models"]:
            row = table.setdefault(model["model"], {})
            for mode in model["modes"]:
                cell = row.setdefault(mode["mode"], {"throughput": [], "peak": [],
                                                     "infeasible": []})
                if "infeasible" in mode:
                    cell["infeasible"].append(mode["smallest_feasible_bytes"])
                    continue
                # A ratio is null where the baseline had no figure (no peak on a machine that
                # measures none): left out of the median.
                for key, field in (("throughput", "samples_per_s"), ("peak", "peak_bytes")):
                    if mode["ratio"][field] is not None:
                        cell[key].append(mode["ratio"][field])
    for row in table.values():
        for cell in row.values():
            for key in ("throughput", "peak"):
                cell[f"median_{key}"] = statistics.median(cell[key]) if cell[key] else None
    return table


def median_json(first: dict, table: dict, rounds: int) -> dict:
    merged = copy.deepcopy(first)
    for model in merged["models"]:
        for mode in model["modes"]:
            cell = table[model["model"]][mode["mode"]]
            if "infeasible" in mode or cell["median_throughput"] is None:
                continue
            mode["ratio"]["samples_per_s"] = cell["median_throughput"]
            mode["ratio"]["peak_bytes"] = cell["median_peak"]
    merged["rounds"] = rounds
    # Said in the file itself: a reader dividing round 1's samples/s by its baseline's gets round
    # 1's ratio, not the one written.
    merged["ratios_are"] = (f"medians over {rounds} rounds; every absolute figure (samples/s, "
                            "peak bytes, times) is round 1's")
    return merged


def markdown(table: dict) -> str:
    lines = ["| model | mode | throughput ÷ script | peak ÷ script |", "|---|---|---|---|"]
    for model, row in table.items():
        for mode, cell in row.items():
            if mode == "script":
                continue
            if cell["median_throughput"] is None:
                smallest = ", ".join(f"{b / 1e6:.1f}" for b in cell["infeasible"])
                lines.append(f"| {model} | `{mode}` | no plan fits (smallest feasible MB: "
                             f"{smallest}) | |")
                continue
            rounds_t = ", ".join(f"{v:.2f}" for v in cell["throughput"])
            rounds_p = ", ".join(f"{v:.2f}" for v in cell["peak"])
            note = f" ({len(cell['infeasible'])} round(s) infeasible)" if cell["infeasible"] else ""
            lines.append(f"| {model} | `{mode}` | {cell['median_throughput']:.3f} ({rounds_t})"
                         f"{note} | {cell['median_peak']:.3f} ({rounds_p}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="a folder for the rounds' files")
    parser.add_argument("--bench", type=Path, default=REPO_ROOT / "build/ci/bin/symtune-bench")
    parser.add_argument("--budgets", default="0.4,0.5,0.6,0.7,0.8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--models", default="all")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not args.bench.is_file():
        parser.error(f"--bench {args.bench}: no such file (build symtune-bench first)")
    args.out.mkdir(parents=True, exist_ok=True)
    rounds = []
    for r in range(1, args.rounds + 1):
        print(f"round {r} of {args.rounds} ...", file=sys.stderr)
        rounds.append(run_round(args.bench, args.out / f"round{r}.json", args))
    table = summarize(rounds)
    (args.out / "median.json").write_text(json.dumps(median_json(rounds[0], table, len(rounds)), indent=2)
                                          + "\n")
    (args.out / "summary.json").write_text(json.dumps(table, indent=2) + "\n")
    print(markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
