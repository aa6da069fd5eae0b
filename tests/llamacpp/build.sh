#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` for the end-to-end test in
# tests/it/llamacpp.rs: from the llama.cpp that the llama-cpp-python sdist
# on PyPI vendors (pinned below), CPU only, Release, statically linked,
# without the web UI, HTTPS, tests or examples.
#
# Idempotent: the binary goes to $LLAMA_SERVER_DIR/llama-server
# (default target/llama-server/, relative to the repository's root), with a
# stamp of what it was built from; a later run with the same stamp does
# nothing. Installs cmake (Debian's) when it is missing; runs as root on a
# fresh Debian 12 machine in CI. The sdist is downloaded with the pip of the
# first `python3` on PATH: .ci/run runs this script with its virtual
# environment, target/venv, first there.
#
# The build takes about 12 minutes of CPU (the script prints its time).
# The binary is 15 MB and needs only libc and libstdc++.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION=0.3.36
DIR="${LLAMA_SERVER_DIR:-target/llama-server}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
BIN="$DIR/llama-server"
# Every option that changes the binary: a change rebuilds it.
CMAKE_ARGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF
  # CI's machine is of the same kind as this one but maybe not the same CPU.
  -DGGML_NATIVE=OFF
  # ggml's own thread pool: no libgomp at run time.
  -DGGML_OPENMP=OFF
  -DLLAMA_BUILD_COMMON=ON
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_APP=OFF
  # No web UI: building it needs npm, and the prebuilt one is downloaded
  # from a host this machine cannot reach.
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  # No HTTPS (so no OpenSSL) and no downloading of models: this version
  # has no curl option left.
  -DLLAMA_OPENSSL=OFF
)
STAMP="llama-cpp-python==$VERSION ${CMAKE_ARGS[*]}"

if [ -x "$BIN" ] && [ "$(cat "$DIR/STAMP" 2>/dev/null)" = "$STAMP" ]; then
  echo "llama-server is built: $BIN ($STAMP)"
  exit 0
fi

if ! command -v cmake >/dev/null 2>&1 || ! command -v c++ >/dev/null 2>&1 \
  || ! command -v make >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends cmake g++ make >/dev/null
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "no pip for python3: run .ci/run, which makes target/venv, or put target/venv/bin first on PATH" >&2
  exit 1
fi

start=$(date +%s)
work="$DIR/work"
rm -rf "$work" "$BIN" "$DIR/STAMP"
mkdir -p "$work"
# `--no-binary llama-cpp-python` (not `:all:`): pip prepares the sdist's
# metadata in an isolated environment, and with `:all:` it would build that
# environment's cmake from source too.
python3 -m pip download -q --disable-pip-version-check --no-deps \
  --no-binary llama-cpp-python -d "$work" "llama-cpp-python==$VERSION"
tar -xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work"
src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
cmake -S "$src" -B "$work/build" "${CMAKE_ARGS[@]}" >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" --target llama-server -j2 >"$work/build.log" 2>&1 \
  || { tail -n 100 "$work/build.log"; exit 1; }
cp "$work/build/bin/llama-server" "$BIN"
"$BIN" --version
echo "$STAMP" >"$DIR/STAMP"
rm -rf "$work"
echo "built $BIN from llama-cpp-python $VERSION in $(($(date +%s) - start)) s"
