#!/usr/bin/env bash
# Installs trireme's build and test dependencies from Debian 12 packages, when missing.
# Used by the README's commands, .ci/run and the container image. Idempotent and quiet.
#   scripts/setup.sh           # build + tests + main job
#   scripts/setup.sh --peer    # also Debian's PyTorch: the CPU peer of bench/ and the fixture script
#   scripts/setup.sh --fuzz    # also clang and libFuzzer: the fuzz harnesses (scripts/test.sh, scripts/fuzz.sh)
# The options combine.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libopenblas-openmp-dev     # CPU f64 GEMMs (OpenMP flavour: one thread pool with our kernels)
  libdnnl-dev                # CPU f32/bf16 GEMMs (oneDNN: kernels for the CPU at hand, AMX bf16)
  libgtest-dev libgmock-dev  # tests
  libbenchmark-dev           # bench/
  libgloo-dev                # CPU collectives
  libtomlplusplus-dev        # configs
  libcli11-dev               # command line
  nlohmann-json3-dev
  libxxhash-dev              # checkpoint checksums (header-only)
  fortunes-zh                # the default corpus: Tang and Song poems
  time                       # bench/: peak memory of each side
  iproute2                   # tests/dist: two "hosts" as network namespaces
  slurm-wlm munge            # tests/dist: a one-node Slurm cluster (scripts/slurm/local_cluster.sh)
)
for option in "$@"; do
  case "$option" in
    --peer) packages+=(python3 python3-numpy python3-torch) ;;  # the PyTorch peer and scripts/make_gpt_fixture.py
    --fuzz) packages+=(clang libclang-rt-14-dev) ;;             # tests/fuzz: clang with libFuzzer, ASan, UBSan
    *) echo "setup: unknown option '$option' (expected --peer or --fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: dependencies present"
