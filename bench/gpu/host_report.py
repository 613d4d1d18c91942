#!/usr/bin/env python3
"""Names and counts the host samples that bench/gpu/host_sampler.cpp wrote.

Each frame is a library and an offset. It is named by addr2line from an unstripped copy of the
same build (the same GNU build ID) in the --symbols folders, such as the one
scripts/gpu_prebuilt.sh keeps in .gpu_symbols/ beside the stripped GPU bundle (stripping keeps
every address), else from the library itself, else by the exported function that holds it, else
as "?? in LIB". --within keeps the samples with a function matching a regular
expression on the stack (the training steps, say, without start-up and checkpoints), and --later
the later part of those (the samples are in time order: 0.5 leaves out the first steps, which
build plans and compile kernels).

  bench/gpu/host_report.py [--symbols DIR]... [--within REGEX] [--later F] [--top N] host_PID.stacks...
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
                index, build, lib = rest.split(" ", 2)
                libs[index] = (lib, "" if build == "-" else build)
            elif kind == "exported":
                key, _, name = rest.partition(" ")
                exported[key] = name
            elif kind == "clock":
                clock = rest
    return libs, exported, samples, clock


def build_id(path):
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True).stdout
    found = re.search(r"Build ID: ([0-9a-f]+)", out)
    return found.group(1) if found else ""


def has_symbol_table(path):
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True).stdout
    return ".symtab" in out


def symbol_file(lib, build, folders):
    """The file to name lib's frames from: a copy of the same build (by its build ID) with a full
    symbol table, in one of the folders or lib itself. (A stripped file has only its exported
    functions, which the sampler already checked; addr2line would give the nearest one below a
    frame even where the frame is past its end.)"""
    candidates = [os.path.join(folder, os.path.basename(lib)) for folder in folders] + [lib]
    for candidate in candidates:
        if os.path.isfile(candidate) and build and build_id(candidate) == build and has_symbol_table(candidate):
            return candidate
    return None


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
        lib, build = libs.get(index, ("??", ""))
        path = symbol_file(lib, build, folders) if lib != "??" else None
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
    parser.add_argument("--later", type=float, default=1.0, help="keep this later part of those samples")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    within = re.compile(args.within) if args.within else None
    for path in args.stacks:
        libs, exported, samples, clock = read_stacks(path)
        names = name_frames(libs, exported, samples, args.symbols)
        stacks = [[names[key] for key in sample] for sample in samples]
        stacks = [s for s in stacks if s and (not within or any(within.search(f) for f in s))]
        stacks = stacks[len(stacks) - int(round(args.later * len(stacks))):]
        self_counts, inclusive = collections.Counter(), collections.Counter()
        for frames in stacks:
            self_counts[frames[0]] += 1
            inclusive.update(set(frames))
        kept = len(stacks)
        scope = f", {kept} of {len(samples)} with /{args.within or ''}/ on the stack, the later {args.later:g}"
        print(f"== {path}: {kept} samples of the main thread's {clock} time{scope}")
        for title, counts, limit in (("self", self_counts, args.top), ("inclusive", inclusive, 2 * args.top)):
            print(f"-- {title} (% of the samples)")
            for name, count in counts.most_common(limit):
                print(f"{100.0 * count / max(kept, 1):6.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
