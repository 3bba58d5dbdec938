#!/usr/bin/env bash
# Make hipRTC usable on a Debian 12 machine with no GPU, for hip-python's gfx* compiles.
#
# Debian's ROCm 5.2 ships hipRTC inside libamdhip64.so.5, while hip-python opens "libhiprtc.so".
# This installs the Debian packages (skipped when present) and makes a private folder holding a
# libhiprtc.so symlink to libamdhip64.so.5, then prints the line that puts it on the loader path.
# (farm.gpu.hip finds libamdhip64.so.5 by itself; the symlink is for hip-python used directly.)
#
#   bash .ci/hiprtc.sh [LIBDIR]      prints: export LD_LIBRARY_PATH=LIBDIR...
#   eval "$(bash .ci/hiprtc.sh)"     or: source .ci/hiprtc.sh [LIBDIR]
#
# Python side: pip install 'hip-python==7.2.2.562.43' (the kernel-farm[hip] extra).

_farm_hiprtc() {
  local libdir="${1:-${HOME:-/root}/.cache/kernel-farm/hiprtc-lib}"
  local missing=() pkg sudo="" amdhip
  for pkg in libamdhip64-5 libhiprtc-builtins5 libamdhip64-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    echo "hiprtc.sh: installing ${missing[*]}" >&2
    $sudo apt-get update -qq >&2 || return 1
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >&2 || return 1
  fi
  amdhip="$(dpkg -L libamdhip64-5 | grep -m1 '/libamdhip64\.so\.5$')"
  if [[ -z "$amdhip" || ! -e "$amdhip" ]]; then
    echo "hiprtc.sh: libamdhip64.so.5 not found in package libamdhip64-5" >&2
    return 1
  fi
  mkdir -p "$libdir" && ln -sfn "$amdhip" "$libdir/libhiprtc.so" || return 1
  _FARM_HIPRTC_DIR="$libdir"
}

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then  # sourced: export here, leave the shell's options
  _farm_hiprtc "$@" && export LD_LIBRARY_PATH="$_FARM_HIPRTC_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  set -euo pipefail
  _farm_hiprtc "$@"
  echo "export LD_LIBRARY_PATH=$_FARM_HIPRTC_DIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
fi
