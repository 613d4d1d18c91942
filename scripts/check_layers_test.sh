#!/usr/bin/env bash
# The layering checker's own test: on fake source trees it must pass clean includes and fail, with
# file:line and the rule, on an upward, a sideways and an unknown include.
set -euo pipefail
checker="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/check_layers.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failed=0

cat >"$tmp/layers.txt" <<'LAYERS'
# lowest first
core
ops    core
nn     ops
optim  ops
LAYERS

# make_tree NAME: a clean tree under $tmp/NAME (nn includes core through ops: allowed).
make_tree() {
  mkdir -p "$tmp/$1"/{core,ops,nn,optim/sub}
  printf '#pragma once\n#include "trireme/core/tensor.h"\n' >"$tmp/$1/core/tensor.h"
  printf '#include "trireme/core/tensor.h"\n' >"$tmp/$1/ops/add.cpp"
  printf '#include "trireme/ops/add.h"\n#include "trireme/core/tensor.h"\n#include <vector>\n' >"$tmp/$1/nn/linear.cpp"
  printf '#include "trireme/ops/add.h"\n' >"$tmp/$1/optim/sub/sgd.cu"
}

# expect NAME STATUS TEXT: the checker on tree NAME exits STATUS and prints TEXT.
expect() {
  local out status=0
  out="$("$checker" --src "$tmp/$1" --layers "$tmp/layers.txt" 2>&1)" || status=$?
  if [[ $status -ne $2 || "$out" != *"$3"* ]]; then
    echo "FAIL $1: expected exit $2 and '$3', got exit $status:"
    echo "$out"
    failed=1
  else
    echo "ok   $1"
  fi
}

make_tree clean
expect clean 0 "layering holds (4 layers)"

make_tree upward
printf '#pragma once\n\n#include "trireme/nn/linear.h"\n' >"$tmp/upward/core/bad.h"
expect upward 1 "core/bad.h:3: core includes nn, which is not below it (core builds on: nothing)"

make_tree sideways
printf '#include "trireme/optim/sgd.h"\n' >"$tmp/sideways/nn/bad.cpp"
expect sideways 1 "nn/bad.cpp:1: nn includes optim, which is not below it (nn builds on: ops)"

make_tree unknown_target
printf '#include "trireme/jit/graph.h"\n' >"$tmp/unknown_target/ops/bad.cuh"
expect unknown_target 1 "ops/bad.cuh:1: includes trireme/jit/, which is not a layer"

make_tree unknown_folder
mkdir -p "$tmp/unknown_folder/jit"
printf '#include "trireme/core/tensor.h"\n' >"$tmp/unknown_folder/jit/graph.cpp"
expect unknown_folder 1 "jit/graph.cpp:1: folder 'jit' is not a layer"

make_tree bad_order
cp "$tmp/layers.txt" "$tmp/layers.keep"
printf 'core\nops core nn\nnn ops\noptim ops\n' >"$tmp/layers.txt"
expect bad_order 2 "'ops' builds on 'nn', which is not listed above it"
mv "$tmp/layers.keep" "$tmp/layers.txt"

exit $failed
