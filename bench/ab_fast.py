#!/usr/bin/env python3
"""bench/ab_fast.py: A/B of amibench variants that keeps only the rounds in
which the host was in its fast state. Not part of CI.

    python3 bench/ab_fast.py ROUNDS MARK MINFAST BIN VARIANT... -- FLAGS...

Each VARIANT is a list of KEY=VALUE words: environment for the run, and
BIN=path to run another binary than BIN. Each round runs every variant,
then every variant again in reverse order (v0 v1 .. v1 v0), each under
/tmp/amigo-bench.lock. A round counts as fast when every run's figure at
size MARK is at least MINFAST (amibench -b bw: MB/s; 35000 at 8 or 16 KiB
on the 2-core hosts here, whose slow state reads 15-22 GB/s). It prints
each round, then for the fast rounds and for all rounds the median of each
variant per size and the median (range) of the rounds' ratios to v0.

Use runs long enough to mean something (--iterations 3000 for bw), and
compare against two or three builds of each tree laid out differently:
see bench/MID_PATH.md, "Copying out and giving back together".

    python3 bench/ab_fast.py 8 16384 35000 ./amibench-a "X=1" "BIN=./amibench-b" \\
        -- -b bw --min-size 8192 --max-size 32768 --iterations 3000
"""
import collections
import os
import statistics as st
import subprocess
import sys


def run(binp, variant, flags):
    env = dict(os.environ)
    for kv in variant.split():
        k, _, x = kv.partition("=")
        env[k] = x
    b = env.pop("BIN", binp)
    out = subprocess.run(["flock", "/tmp/amigo-bench.lock", b] + flags, env=env,
                         capture_output=True, text=True, timeout=600).stdout
    d = {}
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        p = line.split()
        try:
            d[int(p[0])] = float(p[1])
        except (ValueError, IndexError):
            pass
    return d


def main():
    a = sys.argv
    rounds, mark, minfast, binp = int(a[1]), int(a[2]), float(a[3]), a[4]
    i = a.index("--")
    variants, flags = a[5:i], a[i + 1:]
    allr = []
    for r in range(rounds):
        res = collections.defaultdict(list)
        order = list(range(len(variants))) + list(reversed(range(len(variants))))
        for vi in order:
            res[vi].append(run(binp, variants[vi], flags))
        fast = all(x.get(mark, 0) >= minfast for vi in res for x in res[vi])
        allr.append((fast, res))
        print(f"round {r + 1}: {'fast' if fast else 'slow'} " + " ".join(
            f"{variants[vi]}:{st.median([x.get(mark, 0) for x in res[vi]]):.0f}" for vi in range(len(variants))),
            flush=True)
    for label, sel in (("fast rounds", [res for f, res in allr if f]), ("all rounds", [res for f, res in allr])):
        if not sel:
            continue
        print(f"== {label}: {len(sel)}")
        sizes = sorted({s for res in sel for vi in res for x in res[vi] for s in x})
        for s in sizes:
            line = f"{s:>8}"
            for vi, v in enumerate(variants):
                vals = [x[s] for res in sel for x in res[vi] if s in x]
                ratios = [st.median([x[s] for x in res[vi]]) / st.median([x[s] for x in res[0]])
                          for res in sel if all(s in x for x in res[vi] + res[0])]
                if not vals or not ratios:
                    continue
                line += f"  [{v}] {st.median(vals):8.0f} {st.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            print(line)


if __name__ == "__main__":
    main()
