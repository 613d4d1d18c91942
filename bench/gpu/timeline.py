#!/usr/bin/env python3
"""Reads bench/gpu/trace_step.sh's CUPTI timelines and says where a step's compute stream waits.

  python3 bench/gpu/timeline.py DIR [DIR ...]     (DIR: one run's trace_*.csv[.gz], one per rank)

Per rank, over the last full steps (a step ends with its AdamW kernels): the step time, the
compute stream's busy and idle time (the compute stream is the one with the most kernel time),
its idle gaps grouped by what ended on another stream just before the gap closed (the copy or
sum it was waiting for) and by the kernel that then ran, the other streams' copies and kernels,
and the compute stream's kernel time by kernel, to compare with another run (the floor).
"""
import collections
import csv
import glob
import gzip
import os
import re
import subprocess
import sys

STEPS = 3  # the last full steps analysed


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["start"], r["end"] = int(r["start_ns"]), int(r["end_ns"])
        r["stream"] = int(r["stream"])
    return rows


_names = {}


def short(name):
    """A kernel's demangled name without its arguments and template parameters."""
    if name in _names:
        return _names[name]
    out = name
    if name.startswith("_Z"):
        try:
            out = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
        except OSError:
            pass
    if os.environ.get("TIMELINE_FULL_NAMES") == "1":  # keep template arguments: which op a generic kernel ran
        _names[name] = out[:220]
        return _names[name]
    depth, s = 0, ""
    for ch in out:  # drop template arguments and parameter lists
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            s += ch
    s = re.sub(r"^(void|static)\s+", "", s.strip())
    s = s.split("::")[-1] if "cutlass" not in out and "gemm" not in out.lower() else ("gemm:" + s.split("::")[-1])[:60]
    _names[name] = s or name[:60]
    return _names[name]


def label(r):
    return short(r["name"]) if r["kind"] == "kernel" else f'{r["kind"]} {r["name"]} {int(r["bytes"]) >> 20}MiB'


def step_windows(rows, compute):
    ends = sorted(r["end"] for r in rows if r["kind"] == "kernel" and "adam" in r["name"].lower())
    clusters, last = [], None
    for e in ends:  # one step's AdamW kernels end within a few ms of each other
        if last is None or e - last > 5_000_000:
            clusters.append(e)
        else:
            clusters[-1] = e
        last = e
    return list(zip(clusters[:-1], clusters[1:]))[-STEPS:]


HOST_KINDS = ("runtime", "driver")  # TRIREME_CUPTI_API=1: the host's CUDA calls, "stream" = thread


def host_calls(rows, windows, main_thread):
    """The main thread's CUDA calls over the steps: total and the slowest by name."""
    total, count, worst = collections.Counter(), collections.Counter(), {}
    for lo, hi in windows:
        for r in rows:
            if r["stream"] == main_thread and lo <= r["start"] and r["end"] <= hi:
                d = r["end"] - r["start"]
                total[r["name"]] += d
                count[r["name"]] += 1
                if d > worst.get(r["name"], (0, 0))[0]:
                    worst[r["name"]] = (d, r["start"] - lo)
    n = len(windows)
    print("   host CUDA calls of the main thread (ms/step, count/step, longest us at ms into the step):")
    for k, v in total.most_common(14):
        d, at = worst[k]
        print(f"     {v / n / 1e6:7.3f}  {count[k] / n:6.0f}  {d / 1e3:8.1f} @ {at / 1e6:6.2f}  {k}")


def analyse(path):
    everything = [r for r in load(path) if r["end"] > r["start"]]
    rows = [r for r in everything if r["kind"] not in HOST_KINDS]
    host = [r for r in everything if r["kind"] in HOST_KINDS]
    if not rows:
        return None
    busy = collections.Counter()
    for r in rows:
        if r["kind"] == "kernel":
            busy[r["stream"]] += r["end"] - r["start"]
    compute = busy.most_common(1)[0][0]
    windows = step_windows(rows, compute)
    if not windows:
        print(f"{path}: no complete step")
        return None
    gaps_by_cause, gaps_by_next, gaps_by_pair = collections.Counter(), collections.Counter(), collections.Counter()
    gap_count = collections.Counter()
    other = collections.Counter()
    other_n = collections.Counter()
    kernels = collections.Counter()
    idle_total = step_total = 0
    for lo, hi in windows:
        step_total += hi - lo
        inside = [r for r in rows if r["start"] >= lo and r["end"] <= hi]
        comp = sorted((r for r in inside if r["stream"] == compute), key=lambda r: r["start"])
        others = sorted((r for r in inside if r["stream"] != compute), key=lambda r: r["end"])
        for r in comp:
            kernels[label(r)] += r["end"] - r["start"]
        for r in others:
            other[(r["stream"], label(r))] += r["end"] - r["start"]
            other_n[(r["stream"], label(r))] += 1
        t = lo
        j = 0
        prev = "(step start)"
        for r in comp:
            gap = r["start"] - t
            if gap > 2000:
                # What ended on another stream in the gap, last: what the compute stream waited for.
                cause = "host (nothing else ended)"
                while j < len(others) and others[j]["end"] <= r["start"] + 1000:
                    if others[j]["end"] >= t:
                        cause = label(others[j])
                    j += 1
                gaps_by_cause[cause] += gap
                gaps_by_next[label(r)] += gap
                gaps_by_pair[(prev, cause, label(r))] += gap
                gap_count[(prev, cause, label(r))] += 1
                idle_total += gap
            t = max(t, r["end"])
            prev = label(r)
    n = len(windows)
    ms = lambda ns: ns / n / 1e6
    print(f"== {path}: {n} steps, step {ms(step_total):.2f} ms, compute stream {compute} idle {ms(idle_total):.2f} ms")
    print("   idle gaps by what ended last on another stream (ms/step):")
    for k, v in gaps_by_cause.most_common(12):
        print(f"     {ms(v):7.3f}  {k}")
    print("   idle gaps by the kernel that then ran (ms/step):")
    for k, v in gaps_by_next.most_common(10):
        print(f"     {ms(v):7.3f}  {k}")
    print("   idle gaps by (kernel before, what ended last elsewhere, kernel after) (ms/step, count/step, mean us):")
    for k, v in gaps_by_pair.most_common(14):
        c = gap_count[k]
        print(f"     {ms(v):7.3f}  {c / n:5.0f}  {v / c / 1e3:7.1f}  {k[0][:40]} | {k[1][:30]} | {k[2][:40]}")
    if host:  # the thread that made the most calls is the one that queues the step
        main_thread = collections.Counter(r["stream"] for r in host).most_common(1)[0][0]
        host_calls(host, windows, main_thread)
    print("   other streams (ms/step, count/step, mean us):")
    for k, v in other.most_common(12):
        c = other_n[k]
        print(f"     {ms(v):7.3f}  {c / n:6.0f}  {v / c / 1e3:8.1f}  stream {k[0]}: {k[1]}")
    return {k: v / n for k, v in kernels.items()}


# A kernel's kind, by the first pattern its name matches (names differ between frameworks:
# cuBLAS's and CUTLASS's GEMMs, cuDNN's attention, Triton's generated kernels, trireme's own).
KINDS = [("attention", r"flash|attention|fmha|sdpa"), ("gemm", r"gemm|cutlass|nvjet|sm90_|xmma"),
         ("norm", r"norm"), ("loss", r"cross_entropy|softmax|nll"), ("optimizer", r"adam|multi_tensor_apply"),
         ("embedding", r"embedding|index_select|gather|scatter"), ("reduction", r"sum|reduce|red_|column"),
         ("copy/cast", r"copy|cast|convert|cat_|to_copy"), ("fused (generated)", r"triton|fused")]


def kinds(kernels):
    out = collections.Counter()
    for name, ns in kernels.items():
        out[next((k for k, pat in KINDS if re.search(pat, name, re.I)), "elementwise/other")] += ns
    return out


def main():
    results = {}
    for d in sys.argv[1:]:
        for path in sorted(glob.glob(os.path.join(d, "trace_*.csv*"))):
            k = analyse(path)
            if k:
                results[path] = k
    if not results:
        return
    # The compute stream's kernels: the first run against the last (or the one run alone).
    (a, ka), (b, kb) = list(results.items())[0], list(results.items())[-1]
    print(f"== compute-stream kernel ms/step by kind: {a} vs {b}")
    ca, cb = kinds(ka), kinds(kb)
    for k in sorted(set(ca) | set(cb), key=lambda x: -(ca.get(x, 0) + cb.get(x, 0))):
        print(f"   {ca.get(k, 0) / 1e6:8.3f} {cb.get(k, 0) / 1e6:8.3f}  {k}")
    print(f"   {sum(ka.values()) / 1e6:8.3f} {sum(kb.values()) / 1e6:8.3f}  (all)")
    print(f"== compute-stream kernel ms/step: {a} vs {b}")
    top = int(os.environ.get("TIMELINE_TOP", "25"))  # how many kernels to list
    for name in sorted(set(ka) | set(kb), key=lambda x: -(ka.get(x, 0) + kb.get(x, 0)))[:top]:
        print(f"   {ka.get(name, 0) / 1e6:8.3f} {kb.get(name, 0) / 1e6:8.3f}  {name}")

if __name__ == "__main__":
    main()
