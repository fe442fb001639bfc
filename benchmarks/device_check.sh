#!/usr/bin/env bash
# The prepared device check: one NVIDIA GPU, 16 cores, <= 8 minutes; every figure lands in one folder.
#
#   OUT=device-check bash benchmarks/device_check.sh          # on the GPU machine
#   DEVICE=cpu OUT=/tmp/dc bash benchmarks/device_check.sh    # a CPU smoke test of every command line
#
# Parts (each under its own timeout; a part that fails is reported in summary.md and the next one runs):
#   1 build a FLUX-architecture pipeline with random weights (benchmarks/flux_random.py)
#   2 bench it at 1024² (per-step ms, stage split), then the ledger for this GPU with --measured-s (MFU and the
#     prediction beside the measurement); the CUDA-event instrumentation overhead: the same bench run twice
#     is not possible (diffbench has no switch for its CUDA-event instrumentation), so the overhead is read as
#     the end-to-end median minus the sum of the stage medians (what happens outside the timed stages)
#   3 the vae OOM drill (a 507 and the instance survives) — needs Prometheus (promtool/prometheus on PATH)
#   4 a short derive on the random FLUX pipeline with the ledger's predictions (--gpu, --ledger-model)
#   5 the load client's scaling row against the no-op server (workers 1, 2, 4, 8)
set -uo pipefail
OUT=${OUT:-device-check}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.md"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
part() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  if timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; then note "- $name: ok ($((SECONDS - t0)) s)"
  else note "- $name: FAILED or timed out after $((SECONDS - t0)) s (rc $?; see $name.log)"; fi; }

if [ "$DEVICE" = cpu ]; then SCALE=0.1; SIZE=64x64; STEPS=2; DTYPE=float32; RUNS=3
else SCALE=1.0; SIZE=1024x1024; STEPS=8; DTYPE=bfloat16; RUNS=10; fi
GPU_ID=$(python - <<'PY'
import shutil, subprocess
name = ""
if shutil.which("nvidia-smi"):
    name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.splitlines()[0].lower() if True else ""
table = [("h200", "h200"), ("h100 nvl", "h100-nvl"), ("h100 pcie", "h100-pcie"), ("h100", "h100-sxm"),
         ("b200", "b200"), ("a100", "a100-sxm-80gb"), ("l40s", "l40s"), ("l20", "l20"), ("4090", "rtx-4090"),
         ("l4", "l4"), ("a10g", "a10g")]
print(next((gid for key, gid in table if key in name), ""))
PY
)
note "# device check ($(date -u +%FT%TZ)) · device $DEVICE · ledger GPU ${GPU_ID:-none} · $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"

part build 240 python benchmarks/flux_random.py "$OUT/flux-random" --scale "$SCALE" --dtype "$DTYPE"
part bench 240 diffbench bench --model "$OUT/flux-random" --device "$DEVICE" --dtype "$DTYPE" --shapes "$SIZE" \
  --steps "$STEPS" --warmup 2 --runs "$RUNS" --json "$OUT/bench.json"
if [ -s "$OUT/bench.json" ]; then
  P50=$(python -c "import json,sys; s=json.load(open(sys.argv[1]))['shapes'][0]; print(s['latency_s']['p50'])" "$OUT/bench.json")
  python - "$OUT/bench.json" >> "$SUMMARY" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["shapes"][0]
st = s["stages_s"]["median"] if s.get("stages_s") else {}
stage_sum = sum(st.get(k) or 0.0 for k in ("text_encode", "image_encode", "denoise", "vae_decode", "other"))
print(f"- bench: p50 {s['latency_s']['p50']:.3f} s (n={s['latency_s']['n']}), per-step {s['step_s']['median'] * 1e3:.1f} ms, "
      f"stages {', '.join(f'{k} {v:.3f}' for k, v in st.items() if k != 'end_to_end' and v)} s; end-to-end minus the stage sum "
      f"{(s['latency_s']['p50'] - stage_sum) * 1e3:.1f} ms (instrumentation and launch outside the stages)")
PY
  if [ -n "$GPU_ID" ]; then
    part ledger 60 diffbench ledger --model flux.1-dev --gpu "$GPU_ID" --size 1024x1024 --steps "$STEPS" \
      --precision bf16 --measured-s "$P50" --json "$OUT/ledger.json"
  else note "- ledger: skipped (no catalog GPU matched)"; fi
fi
if command -v promtool > /dev/null && command -v prometheus > /dev/null; then
  part drill-vae 180 diffbench drill vae --json "$OUT/drill-vae.json"
else note "- drill-vae: skipped (Prometheus and promtool are not on PATH; the drill runs a local Prometheus)"; fi
LEDGER_ARGS=()
[ -n "$GPU_ID" ] && LEDGER_ARGS=(--gpu "$GPU_ID" --ledger-model flux.1-dev)
part derive 300 diffbench derive --model "$OUT/flux-random" --device "$DEVICE" --dtype "$DTYPE" --size "$SIZE" \
  --steps "$STEPS" --slo-p99 5 --qps 1 --runs 6 --max-warmup 5 --cache-values 0.2 "${LEDGER_ARGS[@]}" \
  --skip attention --out "$OUT/derive"
if [ -s "$OUT/derive/derive.json" ]; then
  python - "$OUT/derive/derive.json" >> "$SUMMARY" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["steps"]:
    m = s.get("measured") or {}
    sp = f" {m['speedup']:.3f}x ({m['ci'][0]:.3f}-{m['ci'][1]:.3f})" if m else ""
    pr = f", predicted {s['predicted_speedup']:.2f}x" if s.get("predicted_speedup") else ""
    print(f"  - {s['stage']} {s['candidate']}: {s['decision']}{sp}{pr}")
PY
fi
part load-scaling 120 python benchmarks/bench_load_client.py --quick --only workers,scale
note "outputs in $OUT"
