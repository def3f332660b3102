#!/usr/bin/env bash
# `make llamacpp`: llama-server and llama-bench built from the llama.cpp tree that PyPI's
# llama-cpp-python sdist vendors (pinned and hash-checked), with this machine's compiler and CPU
# flags, into .llamacpp/ (ignored); build.json there records the llama.cpp commit and the flags,
# and specbench copies it into each run's env.json. Only the sdist is downloaded, once: the
# build turns off everything in llama.cpp's tree that fetches at build or run time (the server's
# prebuilt web UI, HTTPS), and run.backend=llamacpp downloads nothing.
# ISA=avx2 (`make llamacpp-avx2`) builds for AVX2 at most, into .llamacpp-avx2/, whatever this
# CPU has: how llama.cpp runs on the AVX2-only machines most users have (backend.server points a
# run at it).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
COMMIT=0c1e57098  # the llama.cpp commit this sdist vendors (its CHANGELOG.md)
ISA=${ISA:-native}
case "$ISA" in
  native) OUT=.llamacpp; CPU_FLAGS=(-DGGML_NATIVE=ON) ;;
  avx2) OUT=.llamacpp-avx2; CPU_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF) ;;
  *) echo "ISA=$ISA: allowed: native, avx2" >&2; exit 2 ;;
esac
PY=${PY:-.venv/bin/python}
JOBS=${JOBS:-$(nproc)}

SRC=.llamacpp/src  # one sdist for every build
mkdir -p "$SRC" "$OUT"
SDIST="$SRC/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
  echo "llama-cpp-python==$VERSION --hash=sha256:$SHA256" > "$SRC/requirements.txt"
  "$PY" -m pip download -q --no-deps --no-binary :all: --require-hashes \
    -r "$SRC/requirements.txt" -d "$SRC"
fi
echo "$SHA256  $SDIST" | sha256sum -c --quiet
TREE="$SRC/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -d "$TREE" ] || tar -xzf "$SDIST" -C "$SRC"
grep -q "llama.cpp@$COMMIT" "$SRC/llama_cpp_python-$VERSION/CHANGELOG.md"

# Release, the instruction set ISA names, static, no tests/examples/UI/HTTPS
FLAGS=(
  -DCMAKE_BUILD_TYPE=Release "${CPU_FLAGS[@]}" -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_COMMIT="$COMMIT" -DLLAMA_BUILD_NUMBER=0
)
started=$(date +%s)
cmake -S "$TREE" -B "$OUT/build" -G Ninja "${FLAGS[@]}" > "$OUT/cmake.log"
cmake --build "$OUT/build" -j "$JOBS" --target llama-server llama-bench
mkdir -p "$OUT/bin"
cp "$OUT/build/bin/llama-server" "$OUT/build/bin/llama-bench" "$OUT/bin/"

"$PY" - "$OUT" "$VERSION" "$SHA256" "$COMMIT" "$(( $(date +%s) - started ))" "${FLAGS[@]}" <<'EOF'
import json, platform, re, subprocess, sys
out, version, sha, commit, seconds, *flags = sys.argv[1:]
cache = open(f"{out}/build/CMakeCache.txt").read()
compiler = re.search(r"CMAKE_CXX_COMPILER:\w+=(.*)", cache).group(1)
record = {
    "source": f"llama-cpp-python=={version} (sdist, sha256 {sha})",
    "commit": commit,
    "cmake": flags,
    "compiler": subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[0],
    "machine": platform.machine(),
    "build_seconds": int(seconds),
}
json.dump(record, open(f"{out}/bin/build.json", "w"), indent=1)
print(json.dumps(record))
EOF
