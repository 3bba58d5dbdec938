#!/usr/bin/env bash
# Make hipRTC usable on a Debian 12 machine with no GPU, for hip-python's gfx* compiles.
#
# Debian's ROCm 5.2 ships hipRTC inside libamdhip64.so.5; hip-python opens "libhiprtc.so".
# This installs the Debian packages (unless present) and makes a private folder holding a
# libhiprtc.so symlink to libamdhip64.so.5, then prints the LD_LIBRARY_PATH line to use.
#
#   bash .ci/hiprtc.sh [LIBDIR]          # prints: export LD_LIBRARY_PATH=LIBDIR:...
#   eval "$(bash .ci/hiprtc.sh)"         # or: source .ci/hiprtc.sh [LIBDIR]
#
# The Python side: pip install "hip-python==7.2.2.562.43" (kernel-farm[hip]).
set -euo pipefail

_hiprtc_main() {
  local libdir="${1:-${HOME:-/root}/.cache/kernel-farm/hiprtc-lib}"
  local pkgs=(libamdhip64-5 libhiprtc-builtins5 libamdhip64-dev)
  local missing=()
  local p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    local sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    echo "hiprtc.sh: installing ${missing[*]}" >&2
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >&2
  fi
  local amdhip
  amdhip="$(ldconfig -p | awk '/libamdhip64\.so\.5 /{print $NF; exit}')"
  if [[ -z "$amdhip" ]]; then
    amdhip="$(dpkg -L libamdhip64-5 | grep -m1 'libamdhip64\.so\.5$' || true)"
  fi
  [[ -n "$amdhip" && -e "$amdhip" ]] || { echo "hiprtc.sh: libamdhip64.so.5 not found" >&2; return 1; }
  mkdir -p "$libdir"
  ln -sfn "$amdhip" "$libdir/libhiprtc.so"
  # hip-python may also look for versioned names.
  ln -sfn "$amdhip" "$libdir/libhiprtc.so.5"
  echo "export LD_LIBRARY_PATH=$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  HIPRTC_LIBDIR="$libdir"
}

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
  # Sourced: apply the export in the caller's shell, without leaving its options changed.
  set +euo pipefail
  _hiprtc_main "$@" >/dev/null && export LD_LIBRARY_PATH="$HIPRTC_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  _hiprtc_main "$@"
fi
