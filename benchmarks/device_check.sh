#!/usr/bin/env bash
# The prepared device check: one NVIDIA GPU, 16 cores, at most 8 minutes; every figure lands in one folder.
#
#   OUT=device-check bash benchmarks/device_check.sh          # on the GPU machine (from the repository root)
#   DEVICE=cpu OUT=/tmp/dc bash benchmarks/device_check.sh    # CPU smoke test: tiny sizes, every command line
#
# Parts, in order of importance; each runs under `timeout` (min of its cap and the time left of BUDGET_S,
# default 455 s), a part that fails or times out is reported in summary.md and the next one runs:
#   build     benchmarks/flux_random.py: a FluxPipeline with random weights at the FLUX.1-dev denoiser sizes
#             (19 + 38 blocks, 3072 wide, joint 4096, pooled 768) and FLUX's 16-channel VAE, bf16, local disk
#   bench     diffbench bench of it at 1024x1024, 8 steps: per-step ms, stage split, p50 (bench.json)
#   ledger    diffbench ledger --model flux.1-dev --gpu <this GPU> --measured-s <p50>: the prediction beside
#             the measurement, MFU per request (ledger.json); summary.md adds per step and denoiser-only MFU
#   oom       device_check_tools.py oom: serve the pipeline with VAE tiling off under a real CUDA memory limit
#             between the tiled and untiled peaks of a 3072x3072 request: a 507, /health 200 throughout, and
#             the next request served (oom.json; needs no Prometheus)
#   overhead  device_check_tools.py overhead: bench's CUDA-event instrumentation on vs off (diffbench has no
#             switch for it: the same pipeline called bare and through the instrumentation bench attaches,
#             interleaved, with a bare-vs-bare noise floor) (overhead.json)
#   load      diffbench load --workers 1,2,4,8 against the no-op server, constant arrivals (load-workers*.json)
#   derive    a short diffbench derive of the pipeline (512x512, 4 steps; compile skipped for time) with the
#             ledger's predictions for this GPU (derive/derive.json; a timeout leaves a partial one)
#   drill     diffbench drill vae (its own tiny-flux on the CPU and a local Prometheus: the alert path, not
#             CUDA): only when promtool and prometheus are on PATH and time is left
# At the end summary.md collects the key figures (device_check_tools.py summary).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-check}
DEVICE=${DEVICE:-cuda}
BUDGET_S=${BUDGET_S:-455}
PY=${PYTHON:-python}
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
DB=("$PY" -m diffbench.cli.main)
TOOLS=("$PY" benchmarks/device_check_tools.py)
mkdir -p "$OUT"
SUMMARY="$OUT/summary.md"
: > "$SUMMARY"
START=$SECONDS
note() { echo "$*" | tee -a "$SUMMARY"; }
# part NAME CAP_S CMD...: run CMD under timeout (its log in OUT/NAME.log); never fails the script.
part() {
  local name=$1 cap=$2 left t0 rc
  shift 2
  left=$((BUDGET_S - (SECONDS - START)))
  if [ "$left" -lt 20 ]; then note "- $name: skipped (the ${BUDGET_S} s budget is spent)"; return 0; fi
  [ "$cap" -gt "$left" ] && cap=$left
  t0=$SECONDS
  echo "== $name (at most $cap s): $*" >&2
  if timeout --kill-after=15 "$cap" "$@" > "$OUT/$name.log" 2>&1; then
    note "- $name: ok ($((SECONDS - t0)) s)"
  else
    rc=$?
    note "- $name: FAILED (rc $rc$([ "$rc" -eq 124 ] && echo ", timed out at $cap s")) after $((SECONDS - t0)) s; see $name.log"
  fi
}

if [ "$DEVICE" = cpu ]; then
  SCALE=0.05 DTYPE=float32 SIZE=64 STEPS=2 RUNS=3 OV_SIZE=64 OV_STEPS=2 OV_RUNS=3
  OOM_SMALL=64x64 OOM_BIG=1024x1024 D_SIZE=64x64 D_STEPS=2 D_RUNS=2 D_SKIP=attention,compile
  LOAD_RATES=200,400 LOAD_S=1
else
  SCALE=1 DTYPE=bfloat16 SIZE=1024 STEPS=8 RUNS=8 OV_SIZE=1024 OV_STEPS=4 OV_RUNS=5
  OOM_SMALL=512x512 OOM_BIG=3072x3072 D_SIZE=512x512 D_STEPS=4 D_RUNS=4 D_SKIP=compile
  LOAD_RATES=2000,4000,8000,16000,32000 LOAD_S=1
fi
GPU_ID=${GPU_ID:-$("${TOOLS[@]}" gpu-id 2> "$OUT/gpu-id.log" || true)}  # GPU_ID=h100-sxm overrides the match
if [ "$DEVICE" = cpu ] && [ -z "$GPU_ID" ]; then GPU_ID=h100-sxm; fi  # CPU smoke: exercise the --gpu command lines
GPU_NAME=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null | head -1 || true)
note "# device check $(date -u +%FT%TZ): DEVICE=$DEVICE, ${GPU_NAME:-no nvidia-smi}, ledger GPU ${GPU_ID:-none}, $(nproc) cores, commit $(git rev-parse --short HEAD 2> /dev/null || echo '?')"
note ""
MODEL=${MODEL_DIR:-${TMPDIR:-/tmp}/flux-random}  # outside OUT: 24 GB that must not travel with the figures

[ -f "$MODEL/model_index.json" ] && rm -rf "$MODEL"  # an earlier run's pipeline (never another directory)
part build 150 "$PY" benchmarks/flux_random.py "$MODEL" --scale "$SCALE" --dtype "$DTYPE"

part bench 100 "${DB[@]}" bench --engine diffusers --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" \
  --shapes "${SIZE}x${SIZE}" --steps "$STEPS" --warmup 2 --runs "$RUNS" --no-repro --json "$OUT/bench.json"

P50=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['shapes'][0]['latency_s']['p50'])" \
  "$OUT/bench.json" 2> /dev/null) || P50=""
if [ -n "$P50" ] && [ -n "$GPU_ID" ]; then
  part ledger 30 "${DB[@]}" ledger --model flux.1-dev --gpu "$GPU_ID" --size "${SIZE}x${SIZE}" --steps "$STEPS" \
    --precision bf16 --measured-s "$P50" --json "$OUT/ledger.json"
else
  note "- ledger: skipped (no bench.json, or no catalog GPU matched: see gpu-id.log)"
fi

part oom 120 "${TOOLS[@]}" oom --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --small "$OOM_SMALL" \
  --big "$OOM_BIG" --workdir "$OUT/oom" --json "$OUT/oom.json"

part overhead 60 "${TOOLS[@]}" overhead --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --size "$OV_SIZE" \
  --steps "$OV_STEPS" --runs "$OV_RUNS" --json "$OUT/overhead.json"

part load 75 "${TOOLS[@]}" load --out "$OUT" --workers 1,2,4,8 --rates "$LOAD_RATES" --duration "$LOAD_S"

LEDGER_ARGS=()
[ -n "$GPU_ID" ] && LEDGER_ARGS=(--gpu "$GPU_ID" --ledger-model flux.1-dev)
part derive 150 "${DB[@]}" derive --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --size "$D_SIZE" \
  --steps "$D_STEPS" --slo-p99 5 --qps 1 --num-prompts 2 --runs "$D_RUNS" --max-warmup 3 --cache-values 0.2 \
  --skip "$D_SKIP" "${LEDGER_ARGS[@]}" --out "$OUT/derive"

if [ "$DEVICE" = cpu ] && [ -z "${DRILL:-}" ]; then
  note "- drill: skipped on DEVICE=cpu (DRILL=1 runs it; its own tests cover it)"
elif command -v promtool > /dev/null && command -v prometheus > /dev/null; then
  part drill 120 "${DB[@]}" drill vae --json "$OUT/drill-vae.json"
else
  note "- drill: skipped (promtool and prometheus are not on PATH; the drill runs a local Prometheus)"
fi

note ""
"${TOOLS[@]}" summary "$OUT" 2> "$OUT/summary.log" | tee -a "$SUMMARY" || note "(summary of the JSON files failed: see summary.log)"
if [ -z "${KEEP_MODEL:-}" ] && [ -f "$MODEL/model_index.json" ]; then rm -rf "$MODEL"; fi  # 24 GB of weights
note ""
note "total $((SECONDS - START)) s; outputs in $OUT"
