#!/usr/bin/env python3
"""Names and counts the host samples that bench/gpu/host_sampler.cpp wrote.

Each frame is a library and an offset. It is named by addr2line from the first unstripped copy of
its library found in the --symbols folders (the build the stripped GPU bundle was made from:
stripping keeps every address), else from the library itself, else by the exported function that
holds it, else as "?? in LIB". --within keeps the samples with a function matching a regular
expression on the stack (the training steps, say, without start-up and checkpoints).

  bench/gpu/host_report.py [--symbols DIR]... [--within REGEX] [--top N] host_PID.stacks...
"""
import argparse
import collections
import os
import re
import subprocess
import sys


def read_stacks(path):
    libs, exported, samples, clock = {}, {}, [], "cpu"
    with open(path) as f:
        for line in f:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "sample":
                samples.append(rest.split())
            elif kind == "lib":
                index, _, lib = rest.partition(" ")
                libs[index] = lib
            elif kind == "exported":
                key, _, name = rest.partition(" ")
                exported[key] = name
            elif kind == "clock":
                clock = rest
    return libs, exported, samples, clock


def symbol_file(lib, folders):
    for folder in folders:
        candidate = os.path.join(folder, os.path.basename(lib))
        if os.path.isfile(candidate):
            return candidate
    return lib if os.path.isfile(lib) else None


def addr2line(path, offsets):
    """{offset: function} for the offsets addr2line can name in the file at path."""
    if not offsets:
        return {}
    out = subprocess.run(["addr2line", "-f", "-C", "-e", path] + offsets, capture_output=True, text=True).stdout
    lines = out.splitlines()
    names = {}
    for i, offset in enumerate(offsets):
        if 2 * i < len(lines) and lines[2 * i] != "??":
            names[offset] = lines[2 * i]
    return names


def name_frames(libs, exported, samples, folders):
    offsets = collections.defaultdict(set)
    for sample in samples:
        for key in sample:
            index, _, offset = key.partition(":")
            offsets[index].add(offset)
    names = {}
    for index, wanted in offsets.items():
        lib = libs.get(index, "??")
        path = symbol_file(lib, folders) if lib != "??" else None
        found = addr2line(path, ["0x" + o for o in sorted(wanted)]) if path else {}
        for offset in wanted:
            key = index + ":" + offset
            name = found.get("0x" + offset) or exported.get(key) or "?? in " + os.path.basename(lib)
            names[key] = name if len(name) <= 160 else name[:157] + "..."
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stacks", nargs="+")
    parser.add_argument("--symbols", action="append", default=[], help="a folder of unstripped libraries")
    parser.add_argument("--within", help="keep samples with a function matching this on the stack")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    within = re.compile(args.within) if args.within else None
    for path in args.stacks:
        libs, exported, samples, clock = read_stacks(path)
        names = name_frames(libs, exported, samples, args.symbols)
        self_counts, inclusive = collections.Counter(), collections.Counter()
        kept = 0
        for sample in samples:
            frames = [names[key] for key in sample]
            if not frames or (within and not any(within.search(f) for f in frames)):
                continue
            kept += 1
            self_counts[frames[0]] += 1
            inclusive.update(set(frames))
        scope = f", {kept} of {len(samples)} with /{args.within}/ on the stack" if within else ""
        print(f"== {path}: {kept} samples of the main thread's {clock} time{scope}")
        for title, counts, limit in (("self", self_counts, args.top), ("inclusive", inclusive, 2 * args.top)):
            print(f"-- {title} (% of the samples)")
            for name, count in counts.most_common(limit):
                print(f"{100.0 * count / max(kept, 1):6.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
