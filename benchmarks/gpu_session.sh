#!/usr/bin/env bash
# One device-machine call: install carried wheels, then run the named GPU jobs, each writing
# under $OUT. Carry .whl (git-ignored): the wheels the H200 image lacks, for CPython 3.12:
#   pip download --only-binary=:all: --no-deps --python-version 3.12 --platform manylinux2014_x86_64 \
#     --platform manylinux_2_17_x86_64 -d .whl gguf==0.19.0 platformdirs==4.14.9 fastapi==0.165.0 starlette==1.10.0 \
#     uvicorn==0.54.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
#     annotated-doc==0.0.7 typing-inspection==0.4.5 opentelemetry-api typing_extensions==4.16.0
#   pip download --only-binary=:all: --no-deps -d .whl llguidance==1.9.1   # cp39-abi3, manylinux_2_31
#   (the audit logs' numerics id records llguidance: `auditlogs` refuses to serve without it)
# (the server's, for the `rate` job: fastapi 0.165 imports opentelemetry-api; pydantic 2.14
# needs typing_extensions >= 4.16). Usage: benchmarks/gpu_session.sh JOB... with JOB in
#   smol1      keep the first half of the SmolLM2 GGUF (carried in .carry1) in /tmp
#   smol2      join it with the second half (.carry2), check its SHA-256, run generate --device cuda
#              and gpu_agreement.py on it (a real model: greedy runs against HF on the same weights)
#   tests      python -m pytest -m gpu tests/gpu (results JSON in $OUT)
#   ktests     the kernel GPU tests only (tests/gpu/test_gpu_kernels.py)
#   replayrows the row kernels vs their CPU replay (benchmarks/replay_rows_check.py)
#   softexp    soft-exp SiLU / GeGLU vs tl.exp speed + bits vs the CPU replay (benchmarks/softexp_speed.py)
#   matrix     the determinism matrix GPU tests only (tests/gpu/test_gpu_matrix.py; $MATRIX_ARGS,
#              e.g. "-k long": the long-context matrix alone)
#   llm        LLM(device='cuda') tests, incl. the certificate gate (tests/gpu/test_gpu_llm.py)
#   graphs     the decode CUDA graph tests only (tests/gpu/test_gpu_graphs.py)
#   steps      device argmax and async scheduling (tests/gpu/test_gpu_steps.py)
#   info       samebits info / generate --device cuda on a tiny Qwen3 checkpoint
#   serving    benchmarks/gpu_serving.py --sample 8 $SERVING_ARGS (issue 13 workloads)
#   hfstatic   gpu_serving.py --only-b: workload (b) per plan beside HF eager and HF static cache
#   digestcost gpu_serving.py --digest-cost (the invariant plan, (a) and (b) with and without digests,
#              $DIGEST_ARGS e.g. "--rounds 1"; compiles, gc pauses and slowest steps per run)
#   breakdown  benchmarks/gpu_step_breakdown.py (torch.profiler of batch-64 decode steps by kernel category)
#   rate       benchmarks/server_rate_sweep.py (issue 13 (c): 4, 16, 64 req/s through the server)
#   ops        benchmarks/gpu_ops.py
#   moeserve   gpu_serving.py --preset qwen3-30b-a3b --only-b (issue 26: (b) per plan, HF eager and
#              static cache, the batch-64 step against the roofline of the experts it touches)
#   moeagree   gpu_agreement.py on the 30B-A3B shape (bf16, routing, the layer-wise float32 reference)
#   moegrouped the grouped MoE expert kernel's GPU tests (30B-A3B expert shapes, eager and CUDA
#              graph) and benchmarks/moe_grouped.py (grouped vs per-expert vs torch, batch 1/16/64)
#   agree      benchmarks/gpu_agreement.py
#   agree8k    gpu_agreement.py at 8k context: llama-3-8b (llama3 RoPE), qwen3-8b with yarn 4:32768
#   digest     benchmarks/digest_throughput.py (SHA-256 of 512 KB rows on this host's cores)
#   sha256     benchmarks/sha256_check.py (the device SHA-256: compile time, ms per batch, == hashlib)
#   longctx    benchmarks/long_context.py (issue 25: span attention vs SDPA, engine at 128..128k)
#   issue25    issue 25's H200 rows in one call (~7 min on an H100): longctx, servingb, matrix
#   floorprobe split_decode_probe.py --floor, in its own call (about 5 min): the span launch's floors
#              (HND pages and TMA box loads too), the PDL pair, the launch shapes of split_probe_shapes.py
#   splitprobe benchmarks/split_decode_probe.py (split-KV decode: span kernel and merge timed apart,
#              merge launch variants, bits against the shipped merge)
#   prefillprobe benchmarks/prefill_probe.py (prefill launches and the kernel before interior tiles, carried in .baseline: bits
#              against the shipped kernel, time beside it and SDPA flash)
#   ncuprefill Nsight Compute (--set full) of the plan's prefill launch on one prompt of each of
#              $NCU_PREFILL_LENGTHS tokens (default 8192): stall reasons, issue, occupancy
#   ex2probe   benchmarks/ex2_probe.py (ex2.approx.ftz at multiples of 2^-12: a 4,096-entry table
#              model of its bits; the prefill with that exponential, timed beside the shipped one)
#   prefillstate benchmarks/prefill_state_probe.py (the cost of the prefill's second running state:
#              the kernel with one state against the shipped one at one span, bits and time)
#   attn       the attention GPU tests only (tests/gpu/test_gpu_kernels.py -k attention)
#   ncu        Nsight Compute per kernel of one batch-64 decode step (benchmarks/ncu_step.py)
#   mma        benchmarks/mma_validate.py (issue 27: GPU bf16 MMA chains vs the CPU emulator, ~1e9
#              dot products, every input class) then tests/gpu/test_gpu_mma.py
#   mmatest    tests/gpu/test_gpu_mma.py alone (the start-up probe, the ex2 grid included)
#   tp         tensor parallelism GPU tests (tests/gpu/test_gpu_tp.py; the TP = 2 ones need 2 GPUs)
#   tpbench    benchmarks/tp_decode.py (TP = 2 vs TP = 1 decode step at batch 64; 2 GPUs)
#   replay     benchmarks/replay_linear_check.py (issue 27: the plan's linears, 8B and tiny shapes,
#              every launch M picks, vs their CPU replay as bits; PTX/SASS survey of every kernel)
#              then tests/gpu/test_gpu_replay.py (every MMA input class, every launch of the table)
#   replayattn the attention kernels vs their CPU replay, and their time against an earlier kernel
#              file ($REPLAY_BASELINE, default .baseline/_attention_kernel.py, when carried)
#   servingb   gpu_serving.py --only-b --no-hf (ALLOW=1: SAMEBITS_ALLOW_UNCERTIFIED)
#   servingbold the same from the tree before the soft exp2 (carry .whl/old: git archive 2d34e4f src benchmarks)
#   auditlogs  benchmarks/serve_audit_log.py for the tiny llama and qwen3: `samebits serve --device
#              cuda` audit logs of 64 requests x 32 tokens (the logs a CPU verifies, issue 27)
#   auditlog8b the same for random:llama-3-8b (drawn on the CPU: the host rebuilds it), then
#              `samebits verify --device cpu --sample $VERIFY_K` (default 2) on this host's
#              cores, each output line time-stamped (the CPU replay's speed at the 8B shape)
#   verify8b   the committed random 8B H200 log verified on this host's CPU cores, teacher-forced
#              (--sample $VERIFY_K, default 8) then step by step ($VERIFY_KS, default 2), time-stamped
#   deploy28   benchmarks/deploy_published.py $DEPLOY_ARGS: published shapes (random weights) deployed certified
#              by the shipped certificates alone (issue 28), alone vs batched digests; host lscpu
#   gemma      the Gemma 3 GPU tests (tests/gpu/test_gpu_gemma3.py)
#   gemmaserve gpu_serving.py --preset gemma-3-12b --quick --sample 8 (uncertified unless
#              SAMEBITS_CERTIFICATES names its certificates: `samebits certify --model gemma-3-12b`)
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
for job in "$@"; do
  echo "=== $job $(date -u +%H:%M:%S)"
  case "$job" in
    smol1) cp .carry1/smolpart00 /tmp/smolpart00 ;;
    smol2) cat /tmp/smolpart00 .carry2/smolpart01 > /tmp/smollm2.gguf
           echo "$SMOL_SHA  /tmp/smollm2.gguf" | sha256sum -c - &&
           timeout 300 python3 -m samebits.cli generate "What is the capital of France?" \
             --model /tmp/smollm2.gguf --device cuda --max-tokens 24 2>&1 | tee "$OUT/smollm2_cuda.txt" &&
           timeout 240 python3 benchmarks/gpu_agreement.py --presets /tmp/smollm2.gguf \
             --out "$OUT/gpu_agreement_smollm2.json" 2>&1 | tail -5 ;;
    gemma) SAMEBITS_GPU_RESULTS="$OUT" timeout 540 python3 -m pytest -q -m gpu tests/gpu/test_gpu_gemma3.py -p no:cacheprovider --durations=6 2>&1 | tail -30 ;;
    gemmaserve) SAMEBITS_ALLOW_UNCERTIFIED="${SAMEBITS_ALLOW_UNCERTIFIED:-1}" timeout 560 python3 benchmarks/gpu_serving.py --preset gemma-3-12b --quick --sample 8 --out "$OUT/gpu_serving_gemma3.json" 2>&1 | tail -30 ;;
    tests) SAMEBITS_GPU_RESULTS="$OUT" timeout 540 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tail -40 ;;
    ktests) SAMEBITS_GPU_RESULTS="$OUT" timeout 400 python3 -m pytest -q -m gpu tests/gpu/test_gpu_kernels.py -p no:cacheprovider --durations=5 2>&1 | tail -30 ;;
    llm) SAMEBITS_GPU_RESULTS="$OUT" timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_gpu_llm.py -p no:cacheprovider --durations=5 2>&1 | tail -15 ;;
    matrix) SAMEBITS_GPU_RESULTS="$OUT" timeout 480 python3 -m pytest -q -m gpu tests/gpu/test_gpu_matrix.py ${MATRIX_ARGS:-} -p no:cacheprovider --durations=8 2>&1 | tail -30 ;;
    graphs) SAMEBITS_GPU_RESULTS="$OUT" timeout 540 python3 -m pytest -q -m gpu tests/gpu/test_gpu_graphs.py -p no:cacheprovider --durations=8 -o log_cli=true --log-cli-level=INFO 2>&1 | tail -40 ;;
    tp) SAMEBITS_GPU_RESULTS="$OUT" timeout 540 python3 -m pytest -q -m gpu tests/gpu/test_gpu_tp.py -p no:cacheprovider --durations=5 2>&1 | tail -20 ;;
    tpbench) timeout 540 python3 benchmarks/tp_decode.py --out "$OUT/tp_decode.json" 2>&1 | tail -20 ;;
    steps) SAMEBITS_GPU_RESULTS="$OUT" timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_gpu_steps.py -p no:cacheprovider --durations=5 2>&1 | tail -30 ;;
    info) python3 -c "import sys; sys.path.insert(0, 'tests'); from tiny_models import make_tiny_checkpoint as m; m('/tmp/tiny_qwen3', 'qwen3')" &&
          python3 -m samebits.cli info --device cuda --model /tmp/tiny_qwen3 2>&1 | tee "$OUT/info_cuda.txt" | tail -25 &&
          python3 -m samebits.cli generate "Hello there" --device cuda --model /tmp/tiny_qwen3 --max-tokens 8 --seed 1 --no-chat ;;
    agree8k) timeout 280 python3 benchmarks/gpu_agreement.py --presets llama-3-8b --context 8192 \
               --out "$OUT/gpu_agreement_8k_llama.json" 2>&1 | grep -v "^\[transformers\]" | tail -4
             timeout 280 python3 benchmarks/gpu_agreement.py --presets qwen3-8b --context 8192 \
               --yarn 4:32768 --out "$OUT/gpu_agreement_8k_qwen3_yarn.json" 2>&1 | grep -v "^\[transformers\]" | tail -4 ;;
    splitprobe) timeout 300 python3 benchmarks/split_decode_probe.py ${SPLITPROBE_ARGS:-} --out "$OUT/split_decode_probe.json" 2>&1 | cut -c1-400 | tail -12 ;;
    ncuprefill) NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
         for n in ${NCU_PREFILL_LENGTHS:-8192}; do
           timeout 240 "$NCU" --clock-control none -k regex:paged_attention --launch-skip 1 \
             --launch-count 1 --set full --csv --page details \
             --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
             python3 benchmarks/prefill_probe.py --ncu-target "$n" > "$OUT/ncu_prefill_$n.csv" \
             2> "$OUT/ncu_prefill_$n.err"; tail -3 "$OUT/ncu_prefill_$n.err"
           grep -E "Warp Cycles Per Issued|Issue Slots Busy|Achieved Occupancy|Registers Per|Duration|Stall|stalled|Tensor|Theoretical Occ|Compute \(SM\) Throughput|L2 Cache Throughput|Executed Ipc" "$OUT/ncu_prefill_$n.csv" | cut -c1-400 | tail -40
         done ;;
    ex2probe) (cd benchmarks && timeout 300 python3 ex2_probe.py --out "$OUT/ex2_probe.json" 2>&1 | tail -40) ;;
    prefillstate) timeout 300 python3 benchmarks/prefill_state_probe.py --out "$OUT/prefill_state_probe.json" 2>&1 | tail -30 ;;
    prefillprobe) timeout 300 python3 benchmarks/prefill_probe.py --out "$OUT/prefill_probe.json" 2>&1 | tail -40 ;;
    attn) SAMEBITS_GPU_RESULTS="$OUT" timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_gpu_kernels.py -k attention -p no:cacheprovider --durations=5 2>&1 | tail -15 ;;
    longctx) timeout 400 python3 benchmarks/long_context.py ${LONGCTX_ARGS:-} --out "$OUT/long_context.json" 2>&1 | grep -v "^after" | tail -40 ;;
    digestcost) timeout 400 python3 benchmarks/gpu_serving.py --digest-cost --no-hf ${DIGEST_ARGS:-} --out "$OUT/gpu_digest_cost.json" 2>&1 | tail -6 ;;
    hfstatic) timeout 560 python3 benchmarks/gpu_serving.py --only-b --out "$OUT/gpu_serving_hfstatic.json" 2>&1 | grep -v "^after" | tail -12 ;;
    serving) timeout 560 python3 benchmarks/gpu_serving.py --sample 8 ${SERVING_ARGS:-} --out "$OUT/gpu_serving.json" 2>&1 | tail -30 ;;
    breakdown) timeout 300 python3 benchmarks/gpu_step_breakdown.py --trace ${BREAKDOWN_ARGS:-} --out "$OUT/gpu_step_breakdown.json" 2>&1 | grep -v USDT | tail -40 ;;
    rate) for plan in invariant fast; do  # one process per plan: each engine takes 85% of the GPU
            timeout 280 python3 benchmarks/server_rate_sweep.py --plans $plan \
              --out "$OUT/server_rate_sweep_$plan.json" 2>&1 | tail -12; done ;;
    ops) timeout 300 python3 benchmarks/gpu_ops.py --out "$OUT/gpu_ops.json" 2>&1 | tail -70 ;;
    moeserve) timeout 580 python3 benchmarks/gpu_serving.py --preset qwen3-30b-a3b --only-b --out "$OUT/gpu_serving_moe.json" 2>&1 | grep -v "^after" | tail -14 ;;
    moeagree) timeout 500 python3 benchmarks/gpu_agreement.py --presets qwen3-30b-a3b --out "$OUT/gpu_agreement_moe.json" 2>&1 | tail -12 ;;
    moegrouped) SAMEBITS_GPU_RESULTS="$OUT" timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_gpu_moe.py -k grouped -p no:cacheprovider --durations=5 2>&1 | tail -20
                timeout 240 python3 benchmarks/moe_grouped.py --out "$OUT" 2>&1 | tail -25 ;;
    agree) timeout 300 python3 benchmarks/gpu_agreement.py --presets tiny-llama tiny-qwen2 tiny-qwen3 llama-3-8b qwen3-8b --out "$OUT/gpu_agreement.json" 2>&1 | tail -30 ;;
    digest) python3 benchmarks/digest_throughput.py | tee "$OUT/digest_throughput.json" ;;
    sha256) timeout -s KILL 240 python3 benchmarks/sha256_check.py | tee "$OUT/sha256_check.json" ;;
    ncu) NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
         timeout 420 "$NCU" --clock-control none --nvtx --nvtx-include "samebits_step/" --csv \
           --metrics "$(python3 benchmarks/ncu_step.py --metrics)" \
           python3 benchmarks/ncu_step.py --step > "$OUT/ncu_step.csv" 2> "$OUT/ncu_step.err"
         tail -4 "$OUT/ncu_step.err"
         python3 benchmarks/ncu_step.py --summarize "$OUT/ncu_step.csv" --out "$OUT/ncu_step.json" ;;
    mmatest) SAMEBITS_CACHE_DIR=/tmp/samebits-cache SAMEBITS_GPU_RESULTS="$OUT" timeout 150 \
           python3 -m pytest -q -m gpu tests/gpu/test_gpu_mma.py -p no:cacheprovider 2>&1 | tail -8 ;;
    mma) SAMEBITS_CACHE_DIR=/tmp/samebits-cache timeout 420 python3 benchmarks/mma_validate.py \
           --out "$OUT/mma_validate.json" 2>&1 | tail -25
         SAMEBITS_CACHE_DIR=/tmp/samebits-cache SAMEBITS_GPU_RESULTS="$OUT" timeout 150 \
           python3 -m pytest -q -m gpu tests/gpu/test_gpu_mma.py -p no:cacheprovider 2>&1 | tail -8 ;;
    replay) SAMEBITS_CACHE_DIR=/tmp/samebits-cache timeout 400 python3 benchmarks/replay_linear_check.py \
              --out "$OUT/replay_linear.json" 2>&1 | grep -v "^\[transformers\]" | tail -40
            SAMEBITS_CACHE_DIR=/tmp/samebits-cache SAMEBITS_GPU_RESULTS="$OUT" timeout 180 \
              python3 -m pytest -q -m gpu tests/gpu/test_gpu_replay.py -p no:cacheprovider 2>&1 | tail -8 ;;
    replayrows) SAMEBITS_CACHE_DIR=/tmp/samebits-cache timeout 300 python3 benchmarks/replay_rows_check.py \
              --out "$OUT/replay_rows.json" 2>&1 | tail -80 ;;
    softexp) SAMEBITS_CACHE_DIR=/tmp/samebits-cache timeout 420 python3 benchmarks/softexp_speed.py \
              --out "$OUT/softexp_speed.json" 2>&1 | tail -30 ;;
    replayattn) SAMEBITS_CACHE_DIR=/tmp/samebits-cache timeout 400 python3 benchmarks/replay_attention_check.py \
              $(b=${REPLAY_BASELINE:-.baseline/_attention_kernel.py}; [ -f "$b" ] && echo --baseline "$b") \
              --out "$OUT/replay_attention_check.json" 2>&1 | tail -8 ;;
    servingb) SAMEBITS_ALLOW_UNCERTIFIED=${ALLOW:-0} timeout 280 python3 benchmarks/gpu_serving.py --only-b --no-hf \
              --out "$OUT/gpu_serving_b.json" 2>&1 | grep -v "^after" | tail -12 ;;
    servingbold) (cd .whl/old && PYTHONPATH="$PWD/src:/tmp/site" timeout 280 python3 benchmarks/gpu_serving.py \
              --only-b --no-hf --out "$OUT/gpu_serving_b_baseline.json" 2>&1 | grep -v "^after" | tail -12) ;;
    auditlogs) for arch in llama qwen3; do
              timeout 240 python3 benchmarks/serve_audit_log.py --arch "$arch" --device cuda \
                --log "$OUT/audit-gpu-tiny-$arch.jsonl" 2>&1 | tail -3; done ;;
    auditlog8b) log="$OUT/audit-h200-random-llama-3-8b.jsonl"
              timeout 300 python3 benchmarks/serve_audit_log.py --model random:llama-3-8b \
                --device cuda --log "$log" 2>&1 | tail -3
              echo "verify start $(date +%s.%N)"
              timeout "${VERIFY_S:-400}" python3 -m samebits.cli verify "$log" --device cpu \
                --sample "${VERIFY_K:-2}" --seed 0 --no-progress 2>&1 | while IFS= read -r line; do
                echo "$(date +%s.%N) $line"; done | tee "$OUT/verify-cpu-random-llama-3-8b.txt" | tail -8 ;;
    verify8b) log=benchmarks/results/2026-12-03-audit-h200-random-llama-3-8b.jsonl
              for mode in forced stepwise; do
                k=$([ "$mode" = forced ] && echo "${VERIFY_K:-8}" || echo "${VERIFY_KS:-2}")
                echo "verify $mode start $(date +%s.%N)"
                timeout "${VERIFY_S:-280}" python3 -m samebits.cli verify "$log" --device cpu \
                  --replay "$mode" --sample "$k" --seed 0 --no-progress 2>&1 | while IFS= read -r line; do
                  echo "$(date +%s.%N) $line"; done | tee "$OUT/verify-$mode-random-llama-3-8b.txt" | tail -6
              done ;;
    deploy28) lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz" | tee "$OUT/host_cpu.txt"
              timeout 560 python3 benchmarks/deploy_published.py --out "$OUT/deploy_published.json" ${DEPLOY_ARGS:-} 2>&1 | tail -12 ;;
    issue25) OUT="$OUT" bash "$0" longctx servingb matrix ;;
    floorprobe) timeout 580 python3 benchmarks/split_decode_probe.py --floor \
             --out "$OUT/split_decode_probe_floor.json" 2>&1 | cut -c1-400 | tail -12 ;;
    *) echo "unknown job $job" ;;
  esac
done
