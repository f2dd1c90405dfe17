#!/usr/bin/env bash
# Build llama.cpp, the benchmark peer, from the llama.cpp that the pinned llama-cpp-python sdist vendors.
#
#   scripts/build-llama-cpp.sh [--avx2] [--force]
#
# Result: $CODECUE_HOME/llama.cpp/build/bin/{llama-server,llama-bench,llama-completion} (CODECUE_HOME defaults to
# ~/.cache/codecue). Run by .ci/run (for `make test-remote`) and by the benchmarks; the binaries are never committed. GGML_NATIVE=ON
# tunes the build to this CPU, so the stamp records the CPU model and a build from another machine is redone.
# ~5 minutes on 2 cores. Idempotent: exits at once when the same version is already built for this CPU.
# --avx2: AVX2 kernels only (no AVX-512), shared libraries included (libllama.so for llama-cpp-python through
# LLAMA_CPP_LIB_PATH=<bin>): an AVX2-only CPU emulated on a newer one (docs/performance.md). Use another CODECUE_HOME.
set -euo pipefail

VARIANT=native
if [[ "${1:-}" == "--avx2" ]]; then VARIANT=avx2; shift; fi
VERSION="0.3.36"  # llama-cpp-python; vendors llama.cpp commit 0c1e57098
TARGETS=(llama-bench llama-server llama-completion)
HOME_DIR="${CODECUE_HOME:-$HOME/.cache/codecue}"
OUT="$HOME_DIR/llama.cpp"
BUILD="$OUT/build"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"

cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
stamp="llama-cpp-python==$VERSION $VARIANT cpu=${cpu:-unknown}"

built=1
for t in "${TARGETS[@]}"; do [[ -x "$BUILD/bin/$t" ]] || built=0; done
if [[ "${1:-}" != "--force" && $built == 1 && -f "$OUT/STAMP" && "$(cat "$OUT/STAMP")" == "$stamp" ]]; then
    echo "llama.cpp already built: $BUILD/bin"
    exit 0
fi

for tool in cmake ninja c++; do
    command -v "$tool" >/dev/null || { echo "build-llama-cpp: '$tool' is missing (apt-get install cmake ninja-build g++)" >&2; exit 1; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The sdist only: no wheel, nothing installed, no dependencies.
"$PYTHON" -m pip download --quiet --no-deps --no-binary=:all: "llama-cpp-python==$VERSION" -d "$work"
tar -xzf "$work"/*.tar.gz -C "$work"
src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
[[ -f "$src/CMakeLists.txt" ]] || { echo "build-llama-cpp: no vendor/llama.cpp in the sdist" >&2; exit 1; }

rm -rf "$BUILD" "$OUT/STAMP"
mkdir -p "$OUT"
# Static libraries: the binaries keep working after the temporary source tree is gone. The AVX2 variant is shared
# (its libraries land in bin/ next to the binaries) so that llama-cpp-python can load the same kernels.
if [[ $VARIANT == avx2 ]]; then
    cpu_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
               -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF -DBUILD_SHARED_LIBS=ON)
    TARGETS+=(llama)
else
    cpu_flags=(-DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF)
fi
cmake -S "$src" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cpu_flags[@]}" \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$OUT/cmake.log"
cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}"
# The CMake cache and objects point into the deleted source tree; only bin/ is kept.
find "$BUILD" -mindepth 1 -maxdepth 1 ! -name bin -exec rm -rf {} +
echo "$stamp" >"$OUT/STAMP"
echo "llama.cpp built: $BUILD/bin"
