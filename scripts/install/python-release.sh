#!/usr/bin/env bash
# Build CPython the way the official `python` images build it (this project's
# Flink image is python:3.11-slim-bookworm): profile-guided (--enable-optimizations)
# and link-time optimised (--with-lto), shared libpython. Then make a venv of it
# with this project installed, for `bench/engine_cpu.py --python .venv-release/bin/python`:
# the engine's CPU on the interpreter the image runs, beside the development one's.
#
#   scripts/install/python-release.sh                 # CPython 3.11.13 from python.org
#   PYTHON_SOURCE=/path/to/Python-3.11.x.tgz scripts/install/python-release.sh
#
# PYTHON_SOURCE: a source tarball's path or URL (any 3.11.x). The build runs the
# profiling task (a part of CPython's tests) between two compiles: ~40 minutes on
# 2 cores. The interpreter goes to .services/python-release, the venv to
# .venv-release (both ignored by git); a second run reuses them.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=3.11.13
SOURCE="${PYTHON_SOURCE:-https://www.python.org/ftp/python/$VERSION/Python-$VERSION.tgz}"
PREFIX="$PWD/.services/python-release"
if [ ! -x "$PREFIX/bin/python3.11" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  if [ -f "$SOURCE" ]; then cp "$SOURCE" "$work/python.tgz"
  else printf '[setup] fetching %s\n' "$SOURCE" >&2; curl -fsSL -o "$work/python.tgz" "$SOURCE"; fi
  mkdir "$work/src"
  tar -xzf "$work/python.tgz" -C "$work/src" --strip-components=1
  cd "$work/src"
  printf '[setup] configuring CPython as the official image does\n' >&2
  # The official image's flags (docker-library/python), and an rpath so that the
  # interpreter finds its own libpython wherever the system's is.
  ./configure --prefix="$PREFIX" --enable-loadable-sqlite-extensions --enable-optimizations \
    --enable-option-checking=fatal --enable-shared --with-lto --with-system-expat \
    LDFLAGS="-Wl,-rpath,$PREFIX/lib" >"$work/configure.log"
  printf '[setup] building (profile-guided: two compiles and a profiling run; see %s/make.log)\n' "$work" >&2
  make -j"$(nproc)" >"$work/make.log" 2>&1
  make install >"$work/install.log" 2>&1
  cd - >/dev/null
fi
if [ ! -f .venv-release/.vdoctor-installed ]; then
  "$PREFIX/bin/python3.11" -m venv .venv-release
  .venv-release/bin/python -m pip install -q --upgrade pip
  # The same versions as the development venv's, where there is one: the two
  # interpreters then run the same packages, and only the build differs.
  pins=()
  if [ -x .venv/bin/python ]; then
    .venv/bin/python -m pip freeze --exclude-editable >.venv-release/constraints.txt
    pins=(-c .venv-release/constraints.txt)
  fi
  .venv-release/bin/python -m pip install -q "${pins[@]}" -e .
  touch .venv-release/.vdoctor-installed
fi
.venv-release/bin/python -c 'import sysconfig, sys; print(sys.executable, sysconfig.get_config_var("CONFIG_ARGS"))'
