"""Did a re-measurement job measure each stale best again?  For every record of BEST_LOG (the log as
restamped before the job) marked stale, look for a record of the same workload, GPU and config in
HISTORY (the job's log) that is not stale, and print both times.  Exit 1 if one was not measured.
usage: python lab/probes/stale_remeasured.py BEST_LOG HISTORY [GPU]"""
import json
import sys


def key(r):
    return r["input"][2][0], r["provenance"]["gpu"], r["config"]["index"]


def main(best_log, history, gpu=None):
    stale = [r for r in map(json.loads, open(best_log)) if r.get("stale_at")
             and (gpu is None or r["provenance"]["gpu"] == gpu)]
    fresh = {}
    for r in map(json.loads, open(history)):
        if not r.get("stale_at") and r["result"][1] == 0:
            fresh.setdefault(key(r), []).append(min(r["result"][0]))
    missed = 0
    for r in stale:
        got = fresh.get(key(r))
        missed += not got
        print(f"{'ok  ' if got else 'MISS'} {r['input'][2][0][:70]} config {r['config']['index']}: "
              f"stale {min(r['result'][0]) * 1e6:.1f} us, again {', '.join(f'{t * 1e6:.1f}' for t in got or []) or '-'} us")
    print(f"stale bests measured again: {len(stale) - missed}/{len(stale)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
