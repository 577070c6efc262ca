# Shared by scripts/demo.sh and scripts/test.sh: installs what is missing, then configures and
# builds incrementally. Sourced, not run.
# LibTorch's version and where it goes: scripts/install-libtorch.sh (Note [Dependency cache]).

set -euo pipefail

SYMTUNE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$SYMTUNE_ROOT/scripts/install-libtorch.sh"
SYMTUNE_TORCH_HOME=$SYMTUNE_CACHE/$SYMTUNE_TORCH_FOLDER
SYMTUNE_PRESET=${SYMTUNE_PRESET:-ci}
SYMTUNE_BUILD_DIR=$SYMTUNE_ROOT/build/$SYMTUNE_PRESET

# Everything the studio, the tests and the packages need on a bare Debian 12. Installed without
# Recommends, so a CMake package that another one needs is named here itself: Qt Charts' config
# loads Qt OpenGL's, which is in libqt6opengl6-dev (a Recommends of qt6-base-dev).
# The packaging test (tests/install) checks the .deb with dpkg-dev's tools (CPack's Debian
# generator runs `file` on what it packs, a package minimal Debian images leave out) and the
# desktop files with desktop-file-utils, appstream and shared-mime-info.
APT_PACKAGES=(build-essential cmake ninja-build ccache pkg-config git python3 python3-pip
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev libgraphviz-dev
  nlohmann-json3-dev libasio-dev doctest-dev zlib1g-dev libpng-dev libjpeg-dev dpkg-dev file
  desktop-file-utils appstream shared-mime-info)

# What LibTorch's CUDA 13.0 build needs of the CUDA toolkit, checked before the wheel's download
# (Note [Dependency cache] in install-libtorch.sh): its CMake package needs nvcc 13, and its
# libraries (libtorch_cpu among them, so CPU-only runs too) load these through ld.so.conf.
CUDA_LIBRARIES=(libcudart.so.13 libcupti.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2)

log() { printf '[symtune] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else log "need root to run: $*"; exit 1; fi
}

ensure_apt_packages() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  # Another apt (a second clone's first run, unattended-upgrades) is waited for, not failed on.
  as_root apt-get -o DPkg::Lock::Timeout=600 update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${missing[@]}"
}

# Not installed by us: the toolkit is NVIDIA's (docs/building.md, "LibTorch and CUDA"). Said
# plainly here, where torch's CMake package would fail later with a message about Caffe2, and the
# link after it with libraries "not found".
ensure_cuda_toolkit() {
  local nvcc missing=() lib
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if [ ! -x "$nvcc" ]; then
    log "the CUDA 13 toolkit is missing: no nvcc on PATH or in /usr/local/cuda/bin. LibTorch's" \
      "CUDA 13.0 build needs it to build, even where no GPU runs it (docs/building.md)"
    exit 1
  fi
  # Read whole first: under pipefail, `nvcc --version | grep -q` fails when grep stops reading
  # before nvcc has written (SIGPIPE), matched or not.
  local version
  version=$("$nvcc" --version 2>/dev/null || true)
  if ! grep -q 'release 13\.' <<<"$version"; then
    log "$nvcc is not CUDA 13 ($(grep -o 'release [0-9.]*' <<<"$version" || echo 'no release'));" \
      "LibTorch 2.11's wheel is the CUDA 13.0 build (docs/building.md)"
    exit 1
  fi
  # The ci preset builds the CUPTI tracer (SYMTUNE_WITH_CUPTI), whose headers some toolkit
  # installs leave out (NVIDIA's cuda-cupti-dev).
  local include
  include=$(dirname "$nvcc")/../include
  if [ "$SYMTUNE_PRESET" = ci ] && [ ! -f "$include/cupti_activity.h" ] && [ ! -f "$include/../extras/CUPTI/include/cupti_activity.h" ]; then
    log "the CUDA toolkit in $(dirname "$(dirname "$nvcc")") has no CUPTI headers (cupti_activity.h):" \
      "install NVIDIA's cuda-cupti-dev-13-0 (docs/building.md)"
    exit 1
  fi
  # ldconfig is in /sbin, which a user's PATH may leave out; LD_LIBRARY_PATH serves as well.
  local known dir
  known=$("$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null || true)
  for lib in "${CUDA_LIBRARIES[@]}"; do
    grep -qE "^[[:space:]]*$lib[[:space:]]" <<<"$known" && continue
    for dir in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
      [ -e "$dir/$lib" ] && continue 2
    done
    missing+=("$lib")
  done
  if [ ${#missing[@]} -ne 0 ]; then
    log "the dynamic loader cannot find ${missing[*]} (ldconfig -p, LD_LIBRARY_PATH): LibTorch's libraries load" \
      "them, CPU-only runs too. Add the CUDA 13 toolkit's library folder, with cuDNN 9 and" \
      "NCCL 2, to /etc/ld.so.conf.d and run ldconfig (docs/building.md)"
    exit 1
  fi
}

ensure_torch() {
  install_libtorch "$SYMTUNE_TORCH_HOME" || exit 1
}

ensure_deps() {
  ensure_apt_packages
  ensure_cuda_toolkit
  ensure_torch
}

# In a subshell: the caller's working directory stays its own, so relative paths given to
# demo.sh and screenshot.sh mean what they say.
build() (
  cd "$SYMTUNE_ROOT"
  # A build folder configured against another LibTorch folder (SYMTUNE_CACHE or XDG_CACHE_HOME
  # changed) keeps finding the old one through its cached Torch_DIR: it is configured afresh.
  local cached
  cached=$(sed -n 's/^SYMTUNE_TORCH_HOME:PATH=//p' "$SYMTUNE_BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
  if [ -n "$cached" ] && [ "$cached" != "$SYMTUNE_TORCH_HOME" ]; then
    log "LibTorch is now in $SYMTUNE_TORCH_HOME, not $cached: configuring afresh"
    rm -f "$SYMTUNE_BUILD_DIR/CMakeCache.txt" "$SYMTUNE_BUILD_DIR/build.ninja"
  fi
  # Configure anew when the presets changed since the last configure, so a build folder made
  # under older presets (or with an option since made mandatory) cannot carry on quietly.
  if [ ! -f "$SYMTUNE_BUILD_DIR/build.ninja" ] ||
    [ CMakePresets.json -nt "$SYMTUNE_BUILD_DIR/CMakeCache.txt" ]; then
    log "configuring (preset $SYMTUNE_PRESET)"
    # Torch_DIR given: CMake would look first where CMAKE_PREFIX_PATH or a Torch_DIR in the
    # environment says (LibTorch's own instructions set them), and build against that LibTorch.
    cmake --preset "$SYMTUNE_PRESET" -DSYMTUNE_TORCH_HOME="$SYMTUNE_TORCH_HOME" \
      -DTorch_DIR="$SYMTUNE_TORCH_HOME/site/torch/share/cmake/Torch" >&2
  fi
  cmake --build "$SYMTUNE_BUILD_DIR" "$@" >&2
)
