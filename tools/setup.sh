#!/usr/bin/env bash
# Installs what tileops-jit builds with on a fresh Debian 12 machine (needs root and the CUDA 13
# toolkit already under /usr/local/cuda). Safe to run again. On other systems install the same
# packages by hand: CMake >= 3.24, Ninja, fmt, spdlog, nlohmann-json, cxxopts, Catch2 3.
set -euo pipefail
if command -v apt-get >/dev/null && [ -f /etc/debian_version ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  if [ "$codename" = bookworm ] && ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb http://deb.debian.org/debian bookworm-backports main" | $sudo_cmd tee /etc/apt/sources.list.d/backports.list >/dev/null
  fi
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake ninja-build g++ \
    libfmt-dev libspdlog-dev nlohmann-json3-dev libcxxopts-dev pkg-config
  if [ "$codename" = bookworm ]; then
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports catch2
  else
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq catch2
  fi
fi
if [ ! -e /usr/local/cuda/include/nvrtc.h ] && [ -z "${CUDA_HOME:-}" ]; then
  echo "setup: the CUDA toolkit (NVRTC headers and library) was not found in /usr/local/cuda; set CUDA_HOME" >&2
  exit 1
fi
