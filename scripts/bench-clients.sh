#!/usr/bin/env bash
# Many developers, one engine (issue 11.5): a llama-server on this machine serving the default pair's GGUF files
# (the 1.5B target, the 0.5B as its draft model, N parallel slots, prompt cache on), and N simulated developers at
# once, each its own `codecue-lsp --engine http://127.0.0.1:PORT/v1` (codecue-replay run --clients N). One
# llama-server per N, so each count gets exactly N slots. Two runs per N on that server:
#   typing  the typing trace at its real speed: keystrokes cancel requests, as in an editor
#   holes   fill-in-the-middle holes as fast as possible (each client sends its next hole when the last is answered):
#           every request reaches the engine, so this is the engine's latency and throughput under N streams
#
#   scripts/bench-clients.sh [--trace FILE] [--holes-trace FILE] [--clients "1 2 4"] [--speed 1] [--stagger 2]
#                            [--threads 2] [--out docs/bench-clients.json]
#
# Needs scripts/build-llama-cpp.sh's build and `codecue-models fetch` (the GGUF files and the tokenizer). Prints a
# Markdown table for docs/benchmarks.md and writes the JSON (every count and run, per client and overall).
# On a shared machine run it under `flock /tmp/codecue-bench.lock scripts/bench-clients.sh`.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
HOME_DIR="${CODECUE_HOME:-$HOME/.cache/codecue}"
LLAMA_SERVER="$HOME_DIR/llama.cpp/build/bin/llama-server"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
TRACE="$REPO/tests/data/replay_humaneval_demo.jsonl"
HOLES=""  # default: 6 holes cut from 3 HumanEval solutions, made below by HOLES_SYNTH
HOLES_SYNTH="codecue-replay synth --humaneval 10,20,30 --fim-holes 2 --seed 0"
CLIENTS="1 2 4"
SPEED=1
STAGGER=2
THREADS="$(nproc)"
OUT="$REPO/docs/bench-clients.json"
DRAFT_MAX=8  # the draft flags codecue-bench's llama_cpp_draft mode uses (codecue_bench/engine_bench.py)

while [[ $# -gt 0 ]]; do
    case "$1" in
        --trace) TRACE="$2"; shift 2 ;;
        --holes-trace) HOLES="$2"; HOLES_SYNTH="given"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --speed) SPEED="$2"; shift 2 ;;
        --stagger) STAGGER="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        *) echo "bench-clients: unknown argument $1" >&2; exit 2 ;;
    esac
done

[[ -x "$LLAMA_SERVER" ]] || { echo "bench-clients: $LLAMA_SERVER missing: run scripts/build-llama-cpp.sh" >&2; exit 1; }
[[ -f "$TRACE" ]] || { echo "bench-clients: no trace at $TRACE" >&2; exit 1; }
read -r TARGET DRAFT < <(cd "$REPO" && "$PYTHON" -c '
from engine.fetch import gguf_path
from engine.models import load_config
pair = load_config().pair("default")
print(gguf_path(pair.target), gguf_path(pair.draft))')
for f in "$TARGET" "$DRAFT"; do
    [[ -f "$f" ]] || { echo "bench-clients: $f missing: run codecue-models fetch" >&2; exit 1; }
done
# --no-repack where llama.cpp's repacked (AMX) kernels crash on this machine (engine/llamacpp_probe.py)
PEER_ARGS="$(cd "$REPO" && "$PYTHON" -c 'import sys; from engine.llamacpp_probe import peer_arguments
print(" ".join(peer_arguments(*sys.argv[1:])))' "$TARGET" "$DRAFT")"

work="$(mktemp -d)"
server_pid=""
stop_server() {
    if [[ -n "$server_pid" ]]; then
        kill -- "-$server_pid" 2>/dev/null || true  # its own process group (setsid)
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

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_healthy() {  # /health answers 503 while the models load, 200 once a request can be served
    (cd "$REPO" && "$PYTHON" -m codecue_bench.health "$1" "$server_pid" --timeout 300 --name llama-server)
}

llama_command() {  # N PORT: the command line, also recorded in the JSON
    local n="$1" port="$2"
    echo "$LLAMA_SERVER" -m "$TARGET" --spec-type draft-simple -md "$DRAFT" --spec-draft-n-max "$DRAFT_MAX" \
        --spec-draft-n-min 0 --spec-draft-p-min 0.5 -t "$THREADS" -tb "$THREADS" -td "$THREADS" \
        --parallel "$n" -c $((4096 * n)) --cache-prompt --metrics --slots --host 127.0.0.1 --port "$port" $PEER_ARGS
}

for n in $CLIENTS; do
    port="$(free_port)"
    # shellcheck disable=SC2046  # word splitting wanted; the paths have no spaces ($HOME/.cache/codecue/...)
    setsid $(llama_command "$n" "$port") >"$work/llama-$n.log" 2>&1 &
    server_pid=$!
    echo "[N=$n] llama-server on port $port (pid $server_pid), $THREADS threads, $n slots" >&2
    if ! wait_healthy "http://127.0.0.1:$port"; then
        tail -20 "$work/llama-$n.log" >&2
        exit 1
    fi
    llama_command "$n" PORT >"$work/command-$n.txt"
    lsp="$PYTHON -m codecue_lsp --stdio --engine http://127.0.0.1:$port/v1"
    for mode in typing holes; do
        if [[ $mode == typing ]]; then
            timing=(--speed "$SPEED"); trace="$TRACE"
        else
            timing=(--as-fast-as-possible); trace="$HOLES"
        fi
        (cd "$REPO" && "$PYTHON" -m codecue_lsp.replay run "$trace" --clients "$n" --stagger "$STAGGER" \
            "${timing[@]}" --sample-every 0 --server "$lsp" --json "$work/$mode-$n.json") >&2
        # llama-server's counters, cumulative over both runs on this server: drafted and accepted tokens, prefill.
        "$PYTHON" -c 'import sys, httpx; print(httpx.get(sys.argv[1], timeout=10, trust_env=False).text)' \
            "http://127.0.0.1:$port/metrics" >"$work/metrics-$mode-$n.txt" || true
    done
    stop_server
done

# One JSON for every count and run, and the Markdown table for docs/benchmarks.md.
what="N simulated developers, each its own codecue-lsp --engine http://127.0.0.1:PORT/v1, one llama-server with N"
what+=" slots (default pair: 1.5B target + 0.5B draft, Q4_K_M GGUF). typing: the trace at its real speed (keystrokes"
what+=" cancel); holes: FIM holes as fast as possible"
"$PYTHON" -m codecue_lsp.replay.bench_table --work "$work" --clients "$CLIENTS" --out "$OUT" --what "$what" \
    --home "$HOME_DIR" --repo "$REPO" --engine-info "llama-server -t $THREADS, one per client count with N slots" \
    --trace-note "typing: ${TRACE#"$REPO"/} at ${SPEED}x, clients ${STAGGER} s apart; holes: $HOLES_SYNTH"
echo "wrote $OUT" >&2
