# Sourced: source_digest prints a digest of what a build of trireme is made from (the sources,
# the build files, the benchmarks), the same on any machine with the same files.
source_digest() {
  find src bench cmake CMakeLists.txt -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
    -o -name '*.txt' -o -name '*.cmake' -o -name '*.in' \) 2>/dev/null | LC_ALL=C sort | xargs sha256sum |
    sha256sum | cut -d' ' -f1
}
