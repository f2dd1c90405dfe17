#!/usr/bin/env bash
# One call on a lent GPU (the device tool's `run`): codecue-bench gpu with the real Qwen2.5-Coder shapes and random
# weights, eager first, then the engine's compiled static steps (CUDA graphs) in a second process, each under its
# own time limit so that the first's figures survive the second. Results land in $OUT (or ./gpu-bench-out):
#   nvidia-smi.csv, eager/gpu.{json,md}, compiled/gpu.{json,md}, eager.log, compiled.log
# Usage there: bash scripts/gpu-bench.sh            (about 2 + up to 6 minutes)
set -u -o pipefail
out=${OUT:-gpu-bench-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$out/nvidia-smi.csv" 2>&1
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
timeout "${EAGER_SECONDS:-170}" python3 -m codecue_bench gpu --compile off --trials 60 --out "$out/eager" 2>&1 | tee "$out/eager.log"
echo "eager: rc=$?"
timeout "${COMPILED_SECONDS:-380}" python3 -m codecue_bench gpu --compile only --trials 60 --out "$out/compiled" \
    ${COMPILED_WIDTHS:+--compiled-widths "$COMPILED_WIDTHS"} 2>&1 | tee "$out/compiled.log"
echo "compiled: rc=$?"
