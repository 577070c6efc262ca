#!/usr/bin/env python3
"""Where a traced run's time goes: the outermost ops of a Chrome trace written by
`symtune --batch SESSION --trace FILE`, summed by name.

An op is outermost when no other op of its thread encloses it (an `aten::linear` counts, its
`aten::addmm` inside it does not), so the shares add up to the traced time spent in ops. Backward
functions are on the autograd threads and count the same way. Prints JSON: per name its
milliseconds per step and share of the total, largest first.

    python3 bench/python/trace_summary.py tagger.trace.json --from-step 2 --top 12
"""

import argparse
import collections
import json
import sys


def outermost(events):
    """The events no other event of the same (pid, tid) encloses."""
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        end = float("-inf")
        for e in thread:
            if e["ts"] >= end:  # not inside the last outermost op
                yield e
                end = e["ts"] + e.get("dur", 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="the Chrome trace (JSON) of `symtune --batch --trace`")
    parser.add_argument("--from-step", type=int, default=1,
                        help="count the ops of this step and later (default 1: all)")
    parser.add_argument("--top", type=int, default=15, help="names listed (default 15)")
    args = parser.parse_args()

    with open(args.trace) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("op", "backward")
           and e.get("args", {}).get("step", 0) >= args.from_step]
    if not ops:
        sys.exit(f"{args.trace}: no op events from step {args.from_step}")
    steps = {e["args"]["step"] for e in ops if "step" in e.get("args", {})}
    totals = collections.Counter()
    for e in outermost(ops):
        totals[e["name"]] += e.get("dur", 0) / 1000.0
    total = sum(totals.values())
    per_step = max(len(steps), 1)
    out = {
        "trace": args.trace,
        "steps": sorted(steps),
        "op_ms_per_step": total / per_step,
        "ops": [{"name": name, "ms_per_step": ms / per_step, "share": ms / total}
                for name, ms in totals.most_common(args.top)],
    }
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
