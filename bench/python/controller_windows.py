#!/usr/bin/env python3
"""The online controller against fixed configurations, window by window.

Reads a symtune-bench JSON (its modes stepped in turn on the same batches, so step i is the same
batch at about the same moment for every mode) that has online modes (their names contain
"online") beside fixed ones, and prints per model and online mode, for each window of WINDOW
measured steps: the online mode over the default and over the best fixed mode (the best by the
whole run's median), each as the median of the window's per-step ratios (the same batch's
samples/s in one mode over the other's: the batch's own length and the moment's load cancel);
then the first window from which the online mode stays within 5 % of the best, the lowest window
against the default after the first (warm-up) window, and the online mode's throughput from the
controller's warm-up on (the harmonic mean of its steps' samples/s, that is the steps' total time,
from measured step WARMUP) over the default's on the same steps.

From the warm-up on, in windows that begin at measured step WARMUP, it also counts the windows
below BELOW of the default: the online mode's and, with --twin, those of TWIN, a fixed mode that
runs the default's own configuration in another trainer (`script` beside `threads:N` where N is
the machine's thread count). The twin's windows are the floor of the reading: how far the same
configuration falls below itself in a window on this machine.

    bench/python/controller_windows.py run.json --default threads:2 --window 20 \\
        [--warmup-steps 30] [--twin script] [--below 0.97] [--output w.json]
"""

import argparse
import json
import statistics
import sys


def windows(values, size, start=0):
    return [values[i:i + size] for i in range(start, len(values) - size + 1, size)]


def harmonic(values):
    return len(values) / sum(1 / v for v in values)


def ratios(numerator, denominator):
    return [a / b for a, b in zip(numerator, denominator)]


def after_warmup(steps, default, args):
    """Windows from measured step args.warmup_steps on: each one's median per-step ratio over
    the default, the lowest, and how many are below args.below."""
    rows = [statistics.median(w) for w in
            windows(ratios(steps, default), args.window, args.warmup_steps)]
    return {"windows": rows, "lowest": min(rows, default=None),
            "below": sum(1 for r in rows if r < args.below)}


def read_online(model, modes, name, best, args):
    per_step = {mode: modes[mode]["samples_per_s_steps"]
                for mode in (name, args.default, best)}
    over_default = windows(ratios(per_step[name], per_step[args.default]), args.window)
    over_best = windows(ratios(per_step[name], per_step[best]), args.window)
    rows = []
    for i, (d, b) in enumerate(zip(over_default, over_best)):
        rows.append({"window": i, "steps": [i * args.window, (i + 1) * args.window - 1],
                     "online_over_default": statistics.median(d),
                     "online_over_best": statistics.median(b)})
    within = next((r["window"] for i, r in enumerate(rows)
                   if all(q["online_over_best"] >= 0.95 for q in rows[i:])), None)
    lowest = min((r["online_over_default"] for r in rows[1:]), default=None)
    online_after = per_step[name][args.warmup_steps:]
    default_after = per_step[args.default][args.warmup_steps:]
    after = (harmonic(online_after) / harmonic(default_after)
             if online_after and default_after else None)
    from_warmup = {"online": after_warmup(per_step[name], per_step[args.default], args)}
    if args.twin:
        from_warmup["twin"] = after_warmup(modes[args.twin]["samples_per_s_steps"],
                                           per_step[args.default], args)
    print(f"{model} {name}: best fixed {best}, default {args.default}, "
          f"windows of {args.window} measured steps (medians of per-step ratios)")
    for r in rows:
        print(f"  steps {r['steps'][0]:4d}-{r['steps'][1]:4d}  over default "
              f"{r['online_over_default']:.3f}  over best {r['online_over_best']:.3f}")
    print(f"  within 5 % of the best from window {within} on; lowest over the default after "
          f"the first window: {lowest:.3f}" if lowest is not None else "  one window only")
    if after is not None:
        print(f"  from step {args.warmup_steps} on: {after:.3f} of the default's throughput")
    for who, reading in from_warmup.items():
        label = name if who == "online" else f"{args.twin} (twin)"
        if reading["lowest"] is not None:
            print(f"  windows from step {args.warmup_steps}, {label}: lowest "
                  f"{reading['lowest']:.3f} of the default, {reading['below']} of "
                  f"{len(reading['windows'])} below {args.below}")
    return {"model": model, "mode": name, "best": best, "default": args.default,
            "window": args.window, "reading": "median of per-step ratios", "windows": rows,
            "within_5_percent_from_window": within,
            "lowest_over_default_after_first": lowest, "warmup_steps": args.warmup_steps,
            "after_warmup_over_default": after, "below": args.below, "twin": args.twin,
            "from_warmup": from_warmup}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="symtune-bench output with samples_per_s_steps per mode")
    parser.add_argument("--default", required=True, help="the default configuration's mode name")
    parser.add_argument("--window", type=int, default=20, help="measured steps per window")
    parser.add_argument("--warmup-steps", type=int, default=30,
                        help="the controller's warm-up in measured steps (control.warmup_steps)")
    parser.add_argument("--twin", help="a fixed mode running the default's own configuration")
    parser.add_argument("--below", type=float, default=0.97,
                        help="count the windows from the warm-up on below this share of the default")
    parser.add_argument("--output", help="also write the windows as JSON here")
    args = parser.parse_args()
    if args.window < 1 or args.warmup_steps < 0:
        parser.error("--window must be at least 1 and --warmup-steps at least 0")
    with open(args.json, encoding="utf-8") as f:
        run = json.load(f)
    summary = []
    for model in run["models"]:
        modes = {m["mode"]: m for m in model["modes"] if "samples_per_s_steps" in m}
        online = [name for name in modes if "online" in name]
        wanted = [args.default] + ([args.twin] if args.twin else [])
        missing = [name for name in wanted if name not in modes]
        if not online or missing:
            print(f"{model['model']}: needs an online mode and {', '.join(map(repr, wanted))}",
                  file=sys.stderr)
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
