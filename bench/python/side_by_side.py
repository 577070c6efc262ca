#!/usr/bin/env python3
"""The engine's modes and PyTorch eager side by side: symtune-bench and the Python anchor in lockstep.

Two processes timed one after the other on a shared machine drift apart by more than the
differences worth measuring, so this runs them at the same time, taking turns step by step
(Note [Lockstep with the anchor] in bench/harness.h): the harness runs every engine mode's step
i, then the anchor runs PyTorch eager's step i on the same batch, then the harness step i + 1.
Each round is a fresh pair of processes; the summary gives, per model, the median over the rounds
of each round's ratio of median samples/s, with the rounds in parentheses.

    python3 bench/python/side_by_side.py --out /tmp/sbs --rounds 3 \\
        --modes script,eager,bind --baseline eager --steps 10 --warmup 3

writes OUT/round1/{engine,python}.json ... and OUT/summary.json, and prints the table as
Markdown. Run it with the Python that has torch (the anchor's); --bench names the harness.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent


def run_round(args, folder: Path) -> tuple:
    folder.mkdir(parents=True, exist_ok=True)
    for pipe in ("turn.anchor", "turn.engine"):
        path = folder / pipe
        if path.exists():
            path.unlink()
        os.mkfifo(path)
    engine_json, python_json = folder / "engine.json", folder / "python.json"
    engine = [str(args.bench), "--preset", args.preset, "--modes", args.modes,
              "--baseline", args.baseline, "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--device", args.device,
              "--telemetry", args.telemetry, "--export-anchor", str(folder / "export"),
              "--lockstep", str(folder), "--output", str(engine_json)]
    if args.models != "all":
        engine += ["--models", args.models]
    if args.threads:
        engine += ["--threads", str(args.threads)]
    anchor = [sys.executable, str(HERE / "anchor.py"), "--export", str(folder / "export"),
              "--lockstep", str(folder), "--device", args.device, "--modes", "python-eager",
              "--engine-results", str(engine_json), "--output", str(python_json)]
    if args.threads:
        anchor += ["--threads", str(args.threads)]
    with open(folder / "engine.log", "w") as engine_log, \
            open(folder / "python.log", "w") as python_log:
        processes = [subprocess.Popen(engine, stdout=engine_log, stderr=subprocess.STDOUT),
                     subprocess.Popen(anchor, stdout=python_log, stderr=subprocess.STDOUT)]
        codes = [None, None]
        while None in codes:
            for i, process in enumerate(processes):
                if codes[i] is None:
                    try:
                        codes[i] = process.wait(timeout=1)
                    except subprocess.TimeoutExpired:
                        continue
                    if codes[i] != 0:  # the other would wait on its pipe for ever
                        for other in processes:
                            if other.poll() is None:
                                other.kill()
    if codes != [0, 0]:
        raise RuntimeError(f"round in {folder}: symtune-bench exited {codes[0]}, the anchor "
                           f"{codes[1]} (see engine.log and python.log there)")
    return json.loads(engine_json.read_text()), json.loads(python_json.read_text())


def summarize(rounds: list, baseline: str) -> dict:
    """Per model and ratio: the median over the rounds and each round's value."""
    table = {}
    for engine, python in rounds:
        # The two sides are compared only as they ran alike: as many intra-op threads, one torch.
        ours, theirs = engine.get("machine", {}), python.get("machine", {})
        if ours.get("threads") != theirs.get("threads"):
            raise SystemExit(f"side_by_side: the engine ran {ours.get('threads')} threads, "
                             f"Python {theirs.get('threads')}: pass --threads")
        if str(ours.get("torch", "")).split("+")[0] != str(theirs.get("torch", "")).split("+")[0]:
            raise SystemExit(f"side_by_side: the engine ran LibTorch {ours.get('torch')}, Python "
                             f"torch {theirs.get('torch')}")
        anchor = {m["model"]: m for m in python["models"]}
        for model in engine["models"]:
            modes = {m["mode"]: m["samples_per_s"]["median"] for m in model["modes"]
                     if "samples_per_s" in m}  # not a mode that stopped or was refused
            eager = next(m for m in anchor[model["model"]]["modes"]
                         if m["mode"] == "python-eager")
            modes["python-eager"] = eager["samples_per_s"]["median"]
            deviation = (eager.get("loss_agreement") or {}).get("max_rel_dev")
            row = table.setdefault(model["model"], {"ratios": {}, "python_loss_max_rel_dev": []})
            row["python_loss_max_rel_dev"].append(deviation)
            for mode, value in modes.items():
                if mode == "python-eager":
                    continue
                for reference in (baseline, "python-eager"):
                    if mode != reference and reference in modes:
                        row["ratios"].setdefault(f"{mode} / {reference}", []).append(
                            value / modes[reference])
    for row in table.values():
        row["median"] = {key: statistics.median(values) for key, values in row["ratios"].items()}
    keys = sorted({key for row in table.values() for key in row["median"]})
    # Over the models that have the ratio: a mode refused or infeasible on one has none there.
    geomean = {key: math.exp(statistics.fmean(math.log(row["median"][key])
                                              for row in table.values() if key in row["median"]))
               for key in keys}
    return {"models": table, "geomean": geomean, "keys": keys}


def markdown(summary: dict) -> str:
    keys = summary["keys"]
    lines = ["| model | " + " | ".join(f"`{k}`" for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for model, row in summary["models"].items():
        cells = [f"{row['median'][k]:.3f} ({', '.join(f'{v:.2f}' for v in row['ratios'][k])})"
                 if k in row["median"] else "–" for k in keys]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines.append("| **geomean** | " + " | ".join(f"**{summary['geomean'][k]:.3f}**"
                                                  for k in keys) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="a folder for the rounds' files")
    parser.add_argument("--bench", type=Path, default=REPO_ROOT / "build/ci/bin/symtune-bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--models", default="all")
    parser.add_argument("--modes", default="script,eager,bind")
    parser.add_argument("--baseline", default="eager")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--telemetry", choices=("off", "features"), default="off")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not args.bench.is_file():
        parser.error(f"--bench {args.bench}: no such file (build symtune-bench first)")

    rounds = []
    for r in range(1, args.rounds + 1):
        print(f"round {r} of {args.rounds} ...", file=sys.stderr)
        rounds.append(run_round(args, args.out / f"round{r}"))
    summary = summarize(rounds, args.baseline)
    summary["config"] = {k: str(v) for k, v in vars(args).items()}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as error:
        print(f"side_by_side.py: {error}", file=sys.stderr)
        sys.exit(1)
