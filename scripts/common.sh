# Shared by gpubatch's scripts: locate the checkout and the CUDA toolkit.
# shellcheck shell=bash
GPUBATCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export GPUBATCH_ROOT

# nvcc is often installed but not on PATH.
if ! command -v nvcc >/dev/null 2>&1; then
  for dir in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    if [ -x "$dir/nvcc" ]; then
      export PATH="$dir:$PATH"
      break
    fi
  done
fi

gpubatch_jobs() { nproc 2>/dev/null || echo 2; }

# Installs Debian packages that are missing: with apt-get when root, else prints the command and
# fails, so nothing is half-installed behind the user's back.
gpubatch_require_packages() {
  local missing=()
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "gpubatch: missing packages: ${missing[*]}" >&2
    echo "install them with:  sudo apt-get install -y ${missing[*]}" >&2
    return 1
  fi
  echo "gpubatch: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Catch2 v3 in a private prefix, for the stage that builds the tests against it (Debian 12 ships
# v2; bookworm-backports has v3). Prints the prefix; fails if it cannot be fetched or verified.
gpubatch_catch2_v3_prefix() {
  local dir="$GPUBATCH_ROOT/.deps/catch2-v3"
  local deb="libcatch2-dev_3.7.1-0.4~bpo12+1_amd64.deb"
  local sha256="1dbb62ed9f177e1cf51e573903cc553241764bd3b6655f5a98889ad361d008dc"
  if [ ! -f "$dir/usr/lib/cmake/Catch2/Catch2Config.cmake" ]; then
    mkdir -p "$dir"
    curl -sSfL --retry 3 -o "$dir/$deb" \
      "http://deb.debian.org/debian/pool/main/c/catch2/$deb" >&2 || return 1
    echo "$sha256  $dir/$deb" | sha256sum -c --quiet - >&2 || return 1
    dpkg-deb -x "$dir/$deb" "$dir" || return 1
  fi
  echo "$dir/usr"
}

# cuobjdump (and nvdisasm) for the kernel audit, in a private prefix: the CUDA toolkit's
# packages on some systems lack them. Pinned versions from PyPI; prints the bin directory.
gpubatch_cuda_tools() {
  local dir="$GPUBATCH_ROOT/.deps/cuda-tools"
  local bin="$dir/nvidia/cu13/bin"
  if [ ! -x "$bin/cuobjdump" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
      nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51 >&2 || return 1
  fi
  echo "$bin"
}

# Rewrites absolute paths under the checkout in a results file as paths relative to it (a source
# file named in an error message), and the executable as bench/<name> whichever build folder
# holds it, so that results name no machine's folders and read alike from every script.
gpubatch_relative_paths() {
  sed -i -e "s#${GPUBATCH_ROOT}/##g" -e 's#"executable": "[^"]*/bench/#"executable": "bench/#' "$@"
}

# A file-name-safe, lowercase machine name: "NVIDIA H100 80GB HBM3" -> nvidia-h100-80gb-hbm3.
gpubatch_slug() {
  sed -e 's/([^)]*)//g' -e 's/ CPU / /; s/@.*$//' <<<"$1" | tr '[:upper:]' '[:lower:]' |
    tr -cs 'a-z0-9' '-' | sed -e 's/^-*//' -e 's/-*$//'
}
