#!/usr/bin/env python3
"""The online controller against fixed configurations, window by window.

Reads a symtune-bench JSON (its modes stepped in turn, so a window of steps is the same stretch of
time for every mode) that has online modes (their names contain "online") beside fixed ones, and
prints per model and online mode, for each window of WINDOW measured steps: the median samples/s
of the online mode over the default's and over the best fixed mode's (the best by the whole run's
median) in that window; then the first window from which the online mode stays within 5 % of the
best, the lowest window against the default after the first (warm-up) window, and the online
mode's throughput from the controller's warm-up on (the harmonic mean of its steps' samples/s,
that is the steps' total time, from measured step WARMUP) over the default's on the same steps.

    bench/python/controller_windows.py run.json --default threads:2 --window 20 \\
        [--warmup-steps 30] [--output w.json]
"""

import argparse
import json
import statistics
import sys


def windows(values, size):
    return [values[i:i + size] for i in range(0, len(values) - size + 1, size)]


def harmonic(values):
    return len(values) / sum(1 / v for v in values)


def read_online(model, modes, name, best, args):
    steps = {mode: windows(modes[mode]["samples_per_s_steps"], args.window)
             for mode in (name, args.default, best)}
    rows = []
    for i, on in enumerate(steps[name]):
        o = statistics.median(on)
        rows.append({"window": i, "steps": [i * args.window, (i + 1) * args.window - 1],
                     "online_over_default": o / statistics.median(steps[args.default][i]),
                     "online_over_best": o / statistics.median(steps[best][i])})
    within = next((r["window"] for i, r in enumerate(rows)
                   if all(q["online_over_best"] >= 0.95 for q in rows[i:])), None)
    lowest = min((r["online_over_default"] for r in rows[1:]), default=None)
    online_after = modes[name]["samples_per_s_steps"][args.warmup_steps:]
    default_after = modes[args.default]["samples_per_s_steps"][args.warmup_steps:]
    after = (harmonic(online_after) / harmonic(default_after)
             if online_after and default_after else None)
    print(f"{model} {name}: best fixed {best}, default {args.default}, "
          f"windows of {args.window} measured steps")
    for r in rows:
        print(f"  steps {r['steps'][0]:4d}-{r['steps'][1]:4d}  over default "
              f"{r['online_over_default']:.3f}  over best {r['online_over_best']:.3f}")
    print(f"  within 5 % of the best from window {within} on; lowest over the default after "
          f"the first window: {lowest:.3f}" if lowest is not None else "  one window only")
    if after is not None:
        print(f"  from step {args.warmup_steps} on: {after:.3f} of the default's throughput")
    return {"model": model, "mode": name, "best": best, "default": args.default,
            "window": args.window, "windows": rows, "within_5_percent_from_window": within,
            "lowest_over_default_after_first": lowest, "warmup_steps": args.warmup_steps,
            "after_warmup_over_default": after}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="symtune-bench output with samples_per_s_steps per mode")
    parser.add_argument("--default", required=True, help="the default configuration's mode name")
    parser.add_argument("--window", type=int, default=20, help="measured steps per window")
    parser.add_argument("--warmup-steps", type=int, default=30,
                        help="the controller's warm-up in measured steps (control.warmup_steps)")
    parser.add_argument("--output", help="also write the windows as JSON here")
    args = parser.parse_args()
    with open(args.json, encoding="utf-8") as f:
        run = json.load(f)
    summary = []
    for model in run["models"]:
        modes = {m["mode"]: m for m in model["modes"] if "samples_per_s_steps" in m}
        online = [name for name in modes if "online" in name]
        if not online or args.default not in modes:
            print(f"{model['model']}: needs an online mode and {args.default!r}", file=sys.stderr)
            return 2
        fixed = [name for name in modes
                 if "online" not in name and name != run["config"]["baseline"]]
        best = max(fixed, key=lambda name: modes[name]["samples_per_s"]["median"])
        for name in online:
            summary.append(read_online(model["model"], modes, name, best, args))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({"source": args.json, "models": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
