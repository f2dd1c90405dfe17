#!/usr/bin/env bash
# How many developers one GPU serves (issue 11.3): `vllm serve` with the target, its speculative config and prefix
# caching, then N simulated developers at once (codecue-replay run --clients N, each its own
# `codecue-lsp --engine http://127.0.0.1:PORT/v1`) for N = 1, 2, 4, 8. Two runs per N:
#   typing  the typing trace at its real speed: keystrokes cancel requests, as in an editor
#   holes   fill-in-the-middle holes as fast as possible: every request reaches the engine
#
#   scripts/bench-vllm-clients.sh [--model HF_ID] [--draft HF_ID] [--spec draft|ngram|none] [--clients "1 2 4 8"]
#                                 [--trace FILE] [--holes-trace FILE] [--speed 1] [--stagger 2] [--max-model-len 4096]
#                                 [--out out/bench-vllm-clients.json]
#
# Run it on a machine with an NVIDIA GPU and vLLM installed (`pip install vllm`); the models come from the Hugging Face
# hub (or its cache). Environment: VLLM (the vllm command, default `vllm`), NVIDIA_SMI (default `nvidia-smi`), PYTHON
# (the Python with this repository installed, default .venv/bin/python). codecue-lsp builds the prompt with the
# default pair's FIM template and tokenizer: the served model must be a Qwen2.5-Coder (same tokenizer).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
VLLM="${VLLM:-vllm}"
NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
MODEL="Qwen/Qwen2.5-Coder-1.5B-Instruct"  # the default pair's target (models.toml)
DRAFT="Qwen/Qwen2.5-Coder-0.5B-Instruct"  # and its draft
SPEC="draft"
CLIENTS="1 2 4 8"
TRACE="$REPO/tests/data/replay_humaneval_demo.jsonl"
HOLES=""
HOLES_SYNTH="codecue-replay synth --humaneval 10,20,30 --fim-holes 2 --seed 0"
SPEED=1
STAGGER=2
MAX_MODEL_LEN=4096
OUT="$REPO/out/bench-vllm-clients.json"  # a result kept in docs/performance.md goes to docs/results/

fail() { echo "bench-vllm-clients: $*" >&2; exit 1; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --model) MODEL="$2"; shift 2 ;;
        --draft) DRAFT="$2"; shift 2 ;;
        --spec) SPEC="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --trace) TRACE="$2"; shift 2 ;;
        --holes-trace) HOLES="$2"; HOLES_SYNTH="given"; shift 2 ;;
        --speed) SPEED="$2"; shift 2 ;;
        --stagger) STAGGER="$2"; shift 2 ;;
        --max-model-len) MAX_MODEL_LEN="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        *) echo "bench-vllm-clients: unknown argument $1" >&2; exit 2 ;;
    esac
done

# What this needs, checked before anything starts, each with what to do about it.
on_cpu="Without a GPU, measure the same on the CPU: codecue-replay run TRACE --clients N against llama-server (docs/deploy.md)."
command -v "$VLLM" >/dev/null 2>&1 \
    || fail "vLLM is not installed here (no '$VLLM' command): pip install vllm on a machine with a GPU, or set" \
            "VLLM=/path/to/vllm. $on_cpu"
gpus="$("$NVIDIA_SMI" -L 2>/dev/null | grep -c '^GPU ' || true)"
[[ "${gpus:-0}" -ge 1 ]] || fail "no GPU found ('$NVIDIA_SMI -L' lists none): vLLM needs an NVIDIA GPU here. $on_cpu"
[[ -x "$PYTHON" ]] || fail "no Python at $PYTHON: make venv (or set PYTHON to a Python with this repository installed)"
[[ -f "$TRACE" ]] || fail "no trace at $TRACE"
case "$SPEC" in
    draft) SPEC_CONFIG="{\"method\": \"draft_model\", \"model\": \"$DRAFT\", \"num_speculative_tokens\": 5}" ;;
    ngram) SPEC_CONFIG='{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}' ;;
    none) SPEC_CONFIG="" ;;
    *) fail "--spec is draft, ngram or none, not '$SPEC'" ;;
esac

work="$(mktemp -d)"
server_pid=""
stop_server() {
    if [[ -n "$server_pid" ]]; then
        kill -- "-$server_pid" 2>/dev/null || true  # its own process group (setsid): the engine's workers too
        wait "$server_pid" 2>/dev/null || true
        server_pid=""
    fi
}
trap 'stop_server; rm -rf "$work"' EXIT

if [[ -z "$HOLES" ]]; then
    HOLES="$work/holes.jsonl"
    # shellcheck disable=SC2086  # the synth arguments split into words
    (cd "$REPO" && "$PYTHON" -m codecue_lsp.replay ${HOLES_SYNTH#codecue-replay } --out "$HOLES")
fi

port="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
command=("$VLLM" serve "$MODEL" --host 127.0.0.1 --port "$port" --max-model-len "$MAX_MODEL_LEN"
         --enable-prefix-caching --gpu-memory-utilization 0.85)
if [[ -n "$SPEC_CONFIG" ]]; then
    command+=(--speculative-config "$SPEC_CONFIG")
fi
echo "starting: ${command[*]}" >&2
setsid "${command[@]}" >"$work/vllm.log" 2>&1 &
server_pid=$!

# /health answers 200 once the engine can serve; the first start may download the models.
(cd "$REPO" && "$PYTHON" -m codecue_bench.health "http://127.0.0.1:$port" "$server_pid" --timeout 1800 --poll 1 \
    --name "vllm serve") || { tail -30 "$work/vllm.log" >&2; exit 1; }

lsp="$PYTHON -m codecue_lsp --stdio --engine http://127.0.0.1:$port/v1"
# One engine for every N: vLLM batches however many requests come (no slots to size per N).
for n in $CLIENTS; do
    echo "${command[*]}" | sed "s/--port $port/--port PORT/" >"$work/command-$n.txt"
    for mode in typing holes; do
        if [[ $mode == typing ]]; then
            timing=(--speed "$SPEED"); trace="$TRACE"
        else
            timing=(--as-fast-as-possible); trace="$HOLES"
        fi
        (cd "$REPO" && "$PYTHON" -m codecue_lsp.replay run "$trace" --clients "$n" --stagger "$STAGGER" \
            "${timing[@]}" --sample-every 0 --server "$lsp" --json "$work/$mode-$n.json") >&2
        "$PYTHON" -c 'import sys, httpx; print(httpx.get(sys.argv[1], timeout=10, trust_env=False).text)' \
            "http://127.0.0.1:$port/metrics" >"$work/metrics-$mode-$n.txt" || true
    done
done

gpu_names="$("$NVIDIA_SMI" --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | paste -sd ';' || true)"
what="N simulated developers, each its own codecue-lsp --engine http://127.0.0.1:PORT/v1, one vllm serve ($MODEL,"
what+=" speculative: $SPEC). typing: the trace at its real speed (keystrokes cancel); holes: FIM holes as fast as possible"
mkdir -p "$(dirname "$OUT")"
"$PYTHON" -m codecue_lsp.replay.bench_table --work "$work" --clients "$CLIENTS" --out "$OUT" --what "$what" \
    --home "${CODECUE_HOME:-$HOME/.cache/codecue}" --repo "$REPO" --engine-info "GPU: ${gpu_names:-unknown}" \
    --trace-note "typing: ${TRACE#"$REPO"/} at ${SPEED}x, clients ${STAGGER} s apart; holes: $HOLES_SYNTH"
echo "wrote $OUT" >&2
