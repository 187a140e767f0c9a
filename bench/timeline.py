#!/usr/bin/python3
"""timeline: where the iterations of a sync job's workers went, from the lines they wrote with
OMNILEARN_TIMELINE=PATH (worker/client/timeline.h; one file per worker, or one shared file).

The workers' lines are matched by push number (one sync round each), and every time is on the
one wall clock of the machine the processes share. Per round:

  compute        the slowest worker's begin to its finish (forward and backward)
  skew           the first worker's finish to the last's (what the sync barrier waits for)
  push tail      the last finish to the last `written` (gradient still leaving after backward)
  to reply       the last finish to the last `reply` (the round's close and every slice's answer)
  model tail     the last reply to the last `model_in` (the model still arriving)
  forward wait   the longest wait of the next forward for tensors still arriving
  iteration      one worker's begin to its next begin (the median over the workers)

Prints the median of each over the rounds after --skip, with its 10th and 90th percentiles.

    /usr/bin/python3 bench/timeline.py --skip=6 bench/results/peers-logs/resnet18.HL1.omnilearn-colocated.w*.timeline
"""
import argparse
import collections
import json
import statistics
import sys


class NoRounds(ValueError):
    """The timelines hold no whole round (a caller may go on without the phases)."""


def read(paths):
    """{(pid, push): line} from every file."""
    lines = {}
    for path in paths:
        with open(path) as f:
            for text in f:
                text = text.strip()
                if not text:
                    continue
                try:
                    line = json.loads(text)
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}: not a timeline line ({e}): {text[:80]}")
                lines[(line["pid"], line["iteration"])] = line
    return lines


def at(line, event, pick=max):
    """The absolute time (ms) of `event` in `line` (the last of several, or `pick`'s), or None."""
    times = [t for name, t, _ in line["events"] if name == event]
    return line["start_ms"] + pick(times) if times else None


def rounds(lines):
    """Per push number: the workers' lines, and each worker's next line (its next begin)."""
    by_push = collections.defaultdict(dict)
    for (pid, push), line in lines.items():
        by_push[push][pid] = line
    out = []
    for push in sorted(by_push):
        workers = by_push[push]
        if push + 1 not in by_push or set(by_push[push + 1]) != set(workers):
            continue  # the last round, or a worker rejoined: no whole iteration to measure
        out.append((workers, by_push[push + 1]))
    return out


def phases(workers, following):
    """The phases of one round (ms); None where an event is missing."""
    def last(event):
        times = [at(line, event) for line in workers.values()]
        return None if None in times else max(times)

    finishes = {pid: at(line, "finish") for pid, line in workers.items()}
    if None in finishes.values():
        return None
    slowest = max(finishes, key=finishes.get)
    last_finish, reply, model, written = finishes[slowest], last("reply"), last("model_in"), last("written")
    p = {"compute": last_finish - workers[slowest]["start_ms"], "skew": last_finish - min(finishes.values()),
         "push tail": written - last_finish if written is not None else None,
         "to reply": reply - last_finish if reply is not None else None,
         "model tail": model - reply if model is not None and reply is not None else None,
         "forward wait": max(following[pid]["totals"].get("forward_wait", 0.0) for pid in workers),
         "iteration": statistics.median(following[pid]["start_ms"] - workers[pid]["start_ms"] for pid in workers)}
    return p


def summary(lines, skip):
    per = [p for p in (phases(w, f) for w, f in rounds(lines)[skip:]) if p is not None]
    if not per:
        raise NoRounds("no whole round in these timelines (every worker's lines, two pushes at least after --skip)")
    out = {}
    for key in per[0]:
        values = sorted(p[key] for p in per if p[key] is not None)
        if values:
            q = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
            out[key] = {"median": statistics.median(values), "p10": q[0], "p90": q[-1]}
    return len(per), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip", type=int, default=0, help="first rounds left out (joins, the controller's start)")
    ap.add_argument("--json", action="store_true", help="the summary as JSON")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    try:
        n, out = summary(read(args.paths), args.skip)
    except NoRounds as e:
        sys.exit(str(e))
    if args.json:
        print(json.dumps({"rounds": n, "phases": out}))
        return 0
    print(f"{n} rounds")
    for key, v in out.items():
        print(f"  {key:<13} {v['median']:8.1f} ms  (p10 {v['p10']:.1f}, p90 {v['p90']:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
