#!/usr/bin/env bash
# Installs what tileops-jit builds with on a fresh Debian 12 machine (needs root and the CUDA 13
# toolkit already under /usr/local/cuda). Safe to run again. On other systems install the same
# packages by hand: CMake >= 3.24, Ninja, fmt, spdlog, nlohmann-json, cxxopts, Catch2 3 (and, for the
# Python module, Python headers, pybind11 and DLPack).
set -euo pipefail
packages="cmake ninja-build g++ libfmt-dev libspdlog-dev nlohmann-json3-dev libcxxopts-dev python3-dev pybind11-dev
  libdlpack-dev pkg-config catch2"
if command -v apt-get >/dev/null && [ -f /etc/debian_version ]; then
  # Only what is missing is installed: a machine that has everything runs no apt-get at all.
  missing=""
  for package in $packages; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing="$missing $package"
  done
  # Catch2 2 (bookworm's own) does not count.
  case "$(dpkg-query -W -f='${Version}' catch2 2>/dev/null)" in 3.*) ;; *) echo "$missing" | grep -qw catch2 || missing="$missing catch2" ;; esac
  if [ -n "$missing" ]; then
    echo "setup: installing$missing" >&2
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
    if [ "$codename" = bookworm ] && ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "deb http://deb.debian.org/debian bookworm-backports main" | $sudo_cmd tee /etc/apt/sources.list.d/backports.list >/dev/null
    fi
    $sudo_cmd apt-get update -qq
    # Catch2 3 comes from bookworm-backports on Debian 12 (bookworm itself has Catch2 2).
    others=$(echo "$missing" | tr ' ' '\n' | grep -vx catch2 | tr '\n' ' ' || true)
    [ -z "${others// /}" ] || $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $others
    if echo "$missing" | grep -qw catch2; then
      if [ "$codename" = bookworm ]; then
        $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports catch2
      else
        $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq catch2
      fi
    fi
  fi
fi
if [ ! -e /usr/local/cuda/include/nvrtc.h ] && [ -z "${CUDA_HOME:-}" ]; then
  echo "setup: the CUDA toolkit (NVRTC headers and library) was not found in /usr/local/cuda; set CUDA_HOME" >&2
  exit 1
fi
