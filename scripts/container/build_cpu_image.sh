#!/usr/bin/env bash
# Builds the CPU image trireme:<version>-cpu-debian12 with podman on a machine that cannot reach
# a container registry: the Debian 12 base is made with debootstrap from the Debian mirror apt
# already uses (/etc/apt/sources.list*), imported as localhost/debian12-base, then
# container/Containerfile.cpu is built on it. Needs root and: apt-get install podman buildah
# debootstrap runc. Heavy steps run under `nice -n 19`.
#   scripts/container/build_cpu_image.sh               # the base (once), then the image
#   scripts/container/build_cpu_image.sh --rebuild-base # also remake the base
# DEBIAN_MIRROR overrides the mirror (e.g. http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/container/image_tags.sh
source scripts/container/podman_options.sh

rebuild_base=0
for a in "$@"; do
  case "$a" in
    --rebuild-base) rebuild_base=1 ;;
    *) echo "build_cpu_image: unknown option '$a' (expected --rebuild-base)" >&2; exit 2 ;;
  esac
done
for tool in podman debootstrap runc; do
  command -v "$tool" > /dev/null ||
    { echo "build_cpu_image: $tool is missing: apt-get install -y podman buildah debootstrap runc" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "build_cpu_image: debootstrap needs root: run it with sudo" >&2; exit 1; }

# "URI SUITE" for each Debian source apt uses, from one-line (.list) and deb822 (.sources) files.
apt_sources() {
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    sed -E 's/\[[^]]*\]//' | awk '$1 == "deb" { print $2, $3 }'
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] || continue
    awk 'function flush() { for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) if (deb) print u[i], s[j]; nu = ns = deb = 0 }
         /^[[:space:]]*$/ { flush(); next }
         /^Types:/ { deb = ($0 ~ /[[:space:]]deb([[:space:]]|$)/) }
         /^URIs:/ { nu = split(substr($0, 6), u, " ") }
         /^Suites:/ { ns = split(substr($0, 8), s, " ") }
         END { flush() }' "$f"
  done
}
mirror=${DEBIAN_MIRROR:-$(apt_sources | awk '$2 == "bookworm" { print $1; exit }')}
security=$(apt_sources | awk '$2 == "bookworm-security" { print $1; exit }')
[ -n "$mirror" ] || { echo "build_cpu_image: apt uses no Debian 12 (bookworm) mirror; set DEBIAN_MIRROR" >&2; exit 1; }

base=localhost/debian12-base
if ((rebuild_base)) || ! podman image exists "$base"; then
  rootfs=$(mktemp -d /var/tmp/trireme-debian12-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  echo "build_cpu_image: debootstrap bookworm from $mirror"
  nice -n 19 debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$rootfs.log" 2>&1 ||
    { tail -20 "$rootfs.log"; echo "build_cpu_image: debootstrap failed (log: $rootfs.log)" >&2; exit 1; }
  rm -f "$rootfs.log"
  {
    echo "deb $mirror bookworm main"
    echo "deb $mirror bookworm-updates main"
    [ -z "$security" ] || echo "deb $security bookworm-security main"
  } > "$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | nice -n 19 podman import --quiet --change 'CMD ["/bin/bash"]' - "$base" > /dev/null
  echo "build_cpu_image: base $base made in ${SECONDS}s: $(podman image inspect --format "{{.Size}}" "$base" | numfmt --to=iec)"
fi

tag=$(cpu_image_tag)
start=$SECONDS
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
commit=$(git describe --always --dirty --abbrev=12 --exclude='*' 2>/dev/null || echo unknown)
nice -n 19 podman "${podman_global[@]}" build "${podman_build[@]}" \
  --file container/Containerfile.cpu --build-arg BASE="$base" --build-arg IMAGE_TAG="$tag" \
  --build-arg TRIREME_GIT_COMMIT="$commit" --label org.opencontainers.image.revision="$revision" --tag "$tag" .
echo "build_cpu_image: $tag built in $((SECONDS - start))s: $(podman image inspect --format "{{.Size}}" "$tag" | numfmt --to=iec)"
