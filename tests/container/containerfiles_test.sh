#!/usr/bin/env bash
# What can be checked about the container images without building them (that takes a registry
# or many minutes; scripts/container/): the tags computed from the sources, and the structure of
# container/Containerfile.{cpu,gpu}: known instructions only, a FROM whose ARGs are declared, the
# labels and TRIREME_IMAGE naming the tag, the files they copy present; the scripts parse and
# refuse unknown options. Where buildah is installed, its own parser reads both files too.
#   containerfiles_test.sh PROJECT_VERSION   (CMake's parse of project(VERSION), to agree with)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
version=$1
tags=$root/scripts/container/image_tags.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_eq() {  # NAME ACTUAL EXPECTED
  [ "$2" == "$3" ] || fail "$1: got '$2', expected '$3'"
}

# --- Tags -------------------------------------------------------------------------------------
expect_eq "version" "$("$tags" version)" "$version"
expect_eq "cpu tag" "$("$tags" cpu)" "trireme:$version-cpu-debian12"
expect_eq "gpu tag" "$("$tags" gpu)" "trireme:$version-gpu-cuda13.0-cudnn9"

gpu_tag_of() {  # CUDA CUDNN: the gpu tag of a Containerfile with these ARGs (stderr kept)
  printf 'ARG CUDA=%s\nARG CUDNN=%s\nFROM x\n' "$1" "$2" > "$tmp/Containerfile"
  "$tags" gpu "$tmp/Containerfile" 2> "$tmp/err"
}
expect_eq "gpu tag of CUDA 12.4.1, cuDNN 8" "$(gpu_tag_of 12.4.1 8)" "trireme:$version-gpu-cuda12.4-cudnn8"
expect_eq "gpu tag of CUDA 13.1, cuDNN 9" "$(gpu_tag_of 13.1 9)" "trireme:$version-gpu-cuda13.1-cudnn9"
for bad in "13 9" "13.0.1 9.1" "latest 9"; do
  # shellcheck disable=SC2086
  if gpu_tag_of $bad > /dev/null; then fail "gpu tag of CUDA/cuDNN '$bad' was accepted"; fi
  grep -q "is not" "$tmp/err" || fail "gpu tag of '$bad': no reason given ($(cat "$tmp/err"))"
done
printf 'FROM x\n' > "$tmp/Containerfile"
if "$tags" gpu "$tmp/Containerfile" 2> "$tmp/err"; then fail "a Containerfile without ARG CUDA made a gpu tag"; fi
grep -q "no 'ARG CUDA=" "$tmp/err" || fail "missing ARG CUDA: unclear error ($(cat "$tmp/err"))"

# A version the sources do not have is refused, not turned into a tag.
mkdir -p "$tmp/fake/scripts/container"
cp "$tags" "$tmp/fake/scripts/container/"
printf 'project(trireme LANGUAGES CXX)\n' > "$tmp/fake/CMakeLists.txt"
if "$tmp/fake/scripts/container/image_tags.sh" cpu > /dev/null 2> "$tmp/err"; then fail "a project() without VERSION made a tag"; fi
grep -q "no project(trireme VERSION" "$tmp/err" || fail "project() without VERSION: unclear error ($(cat "$tmp/err"))"
printf 'project(trireme VERSION 2.10.3 LANGUAGES CXX)\n' > "$tmp/fake/CMakeLists.txt"
expect_eq "cpu tag of version 2.10.3" "$("$tmp/fake/scripts/container/image_tags.sh" cpu)" "trireme:2.10.3-cpu-debian12"

# --- Containerfile structure ------------------------------------------------------------------
# Logical lines: comments and blank lines dropped, backslash continuations joined.
logical_lines() {
  awk '/^[[:space:]]*#/ || /^[[:space:]]*$/ { next }
       { line = line $0 }
       /\\[[:space:]]*$/ { sub(/\\[[:space:]]*$/, "", line); next }
       { print line; line = "" }
       END { if (line != "") print line }' "$1"
}
known='^(FROM|RUN|CMD|LABEL|EXPOSE|ENV|ADD|COPY|ENTRYPOINT|VOLUME|USER|WORKDIR|ARG|ONBUILD|STOPSIGNAL|HEALTHCHECK|SHELL)$'
check_containerfile() {  # FILE KIND(cpu|gpu)
  local file=$1 kind=$2 name
  name=$(basename "$file")
  [ -f "$file" ] || { fail "$name is missing"; return; }
  logical_lines "$file" > "$tmp/lines"
  local n=0 seen_from=0 declared=" " instr rest
  while IFS= read -r line; do
    n=$((n + 1))
    instr=${line%%[[:space:]]*}
    rest=${line#"$instr"}
    [[ ${instr^^} =~ $known ]] || { fail "$name: '$instr' is not a Containerfile instruction (logical line $n)"; continue; }
    [ "$instr" == "${instr^^}" ] || fail "$name: '$instr' should be written in capitals"
    [[ $rest =~ [^[:space:]] ]] || fail "$name: $instr without arguments"
    case "$instr" in
      ARG) ((seen_from)) || declared+="$(sed -E 's/^[[:space:]]*([A-Za-z_][A-Za-z_0-9]*).*/\1/' <<<"$rest") " ;;
      FROM)
        seen_from=1
        for v in $(grep -oE '\$\{?[A-Za-z_][A-Za-z_0-9]*' <<<"$rest" | tr -d '${'); do
          [[ $declared == *" $v "* ]] || fail "$name: FROM uses \$$v, which no ARG before it declares"
        done ;;
      *) ((seen_from)) || fail "$name: $instr before FROM (only ARG may come first)" ;;
    esac
    if [ "$instr" == COPY ]; then
      read -ra parts <<<"$rest"
      for src in "${parts[@]:0:${#parts[@]}-1}"; do
        [[ $src == --* || $src == . ]] || [ -e "$root/$src" ] || fail "$name: COPY of $src, which the sources lack"
      done
    fi
  done < "$tmp/lines"
  ((seen_from)) || fail "$name: no FROM"
  grep -qE '^RUN .*scripts/setup\.sh' "$tmp/lines" || fail "$name: does not install with scripts/setup.sh"
  grep -qE "scripts/build\.sh" "$tmp/lines" || fail "$name: does not build with scripts/build.sh"
  grep -qE "cmake --install" "$tmp/lines" || fail "$name: does not install trireme (cmake --install)"
  grep -qE "configs examples" "$tmp/lines" || fail "$name: does not carry configs/ and examples/"
  grep -qE "image_tags\.sh $kind" "$tmp/lines" || fail "$name: does not check IMAGE_TAG against image_tags.sh $kind"
  grep -qE '^ENV TRIREME_IMAGE=\$\{IMAGE_TAG\}$' "$tmp/lines" || fail "$name: no 'ENV TRIREME_IMAGE=\${IMAGE_TAG}'"
  grep -qE '^LABEL .*ai\.trireme\.image\.tag="\$\{IMAGE_TAG\}"' "$tmp/lines" || fail "$name: no ai.trireme.image.tag label"
  if [ "$kind" == gpu ]; then
    grep -qE '^FROM [^ ]*nvidia/cuda:\$\{CUDA\}-cudnn-devel-' "$tmp/lines" || fail "$name: not FROM nvidia/cuda:\${CUDA}-cudnn-devel-..."
    grep -qE '^ARG CUDA=13\.' "$tmp/lines" || fail "$name: the base is not CUDA 13"
    grep -qE '^ARG CUDNN=9$' "$tmp/lines" || fail "$name: the base is not cuDNN 9"
    for label in 'ai.trireme.nccl="${NCCL_VERSION}"' 'ai.trireme.cuda="${CUDA}"' 'ai.trireme.cudnn="${CUDNN}"'; do
      grep -qF "$label" "$tmp/lines" || fail "$name: no label $label"
    done
    grep -qE -- '-DTRIREME_WITH_CUDA=ON -DTRIREME_WITH_NCCL=ON -DTRIREME_WITH_CUDNN=ON' "$tmp/lines" ||
      fail "$name: not built with CUDA, NCCL and cuDNN (its attention)"
  else
    grep -qE -- '-DTRIREME_WITH_CUDA=OFF' "$tmp/lines" || fail "$name: not built without CUDA"
  fi
  grep -qE -- '-DTRIREME_NATIVE=OFF' "$tmp/lines" || fail "$name: built with -march=native: the image would only run on CPUs like the builder's"
}
check_containerfile "$root/container/Containerfile.cpu" cpu
check_containerfile "$root/container/Containerfile.gpu" gpu

# The checker itself must catch a broken file.
sed 's/^RUN /RUNN /' "$root/container/Containerfile.cpu" > "$tmp/broken.cpu"
before=$failures
check_containerfile "$tmp/broken.cpu" cpu > "$tmp/out"
if ((failures == before)); then fail "the checker accepted a Containerfile with RUNN"; else failures=$before; fi
grep -q "'RUNN' is not a Containerfile instruction" "$tmp/out" || fail "the checker's message for RUNN: $(cat "$tmp/out")"

# --- The scripts ------------------------------------------------------------------------------
for script in "$root"/scripts/container/*.sh; do
  bash -n "$script" 2> "$tmp/err" || fail "$(basename "$script"): $(cat "$tmp/err")"
done
for script in build_cpu_image.sh test_in_image.sh; do
  status=0
  "$root/scripts/container/$script" --no-such-option > "$tmp/out" 2>&1 || status=$?
  [ "$status" -eq 2 ] && grep -q "unknown option '--no-such-option'" "$tmp/out" ||
    fail "$script --no-such-option: exit $status, $(cat "$tmp/out")"
done

# --- buildah's parser -------------------------------------------------------------------------
# buildah reads the whole file before it looks for the base image, so with --pull=never and a
# base that is not there, a file it can parse fails on the missing image, and one it cannot on
# the syntax. Needs root (its storage); skipped otherwise.
if command -v buildah > /dev/null && [ "$(id -u)" -eq 0 ]; then
  parse_with_buildah() {  # FILE: buildah's error, which must be about the base image
    timeout 120 buildah --storage-driver vfs --root "$tmp/storage" --runroot "$tmp/run" build --pull=never \
      --build-arg BASE=localhost/trireme-test-absent-base --build-arg CUDA=0.0.0-absent \
      -f "$1" "$root" > "$tmp/buildah.out" 2>&1 && return 1
    grep -qiE "localhost/trireme-test-absent-base|nvidia/cuda:0\.0\.0-absent" "$tmp/buildah.out"
  }
  for f in "$root"/container/Containerfile.cpu "$root"/container/Containerfile.gpu; do
    parse_with_buildah "$f" || fail "buildah could not parse $(basename "$f"): $(tail -3 "$tmp/buildah.out")"
  done
  sed 's/^FROM .*/FROM ${BASE/' "$root/container/Containerfile.cpu" > "$tmp/broken.cpu"
  if parse_with_buildah "$tmp/broken.cpu"; then fail "buildah's check accepted an unterminated \${ in FROM"; fi
else
  echo "containerfiles_test: buildah's parser skipped (needs buildah and root)"
fi

if ((failures)); then echo "containerfiles_test: $failures failure(s)"; exit 1; fi
echo "containerfiles_test: tags and Containerfiles OK"
