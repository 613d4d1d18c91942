// The trireme command line.
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("trireme %s\n", TRIREME_VERSION);
    return 0;
  }
  std::printf("usage: trireme [--version] [--help]\n");
  return 0;
}
