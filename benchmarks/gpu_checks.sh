#!/usr/bin/env bash
# Every check and benchmark that needs the GPU machine (16-core Xeon + one NVIDIA GPU), in one run; the stages run
# most wanted first (STAGES' default order: 4 and 7, acting on ready copies there, and 8, start-up, are what is not yet
# measured):
#   1. the learner's minibatch step beside a bare PyTorch step (benchmarks/learner/learner_step.py: loop, device step with eager
#      kernels and with inductor's, each captured as a CUDA graph);
#   2. the CUDA tests (pytest -m gpu);
#   3. the CPU learner on that machine's CPU (it has AMX bf16): the CNN update in fp32, channels-last and bf16, and
#      learner.amp/compile auto, which times those ways on its first update and says which it kept;
#   4. Breakout at GPU_WORKERS rollout workers (14) with the GPU learner, async, its envs in one group and half of them
#      acted on as they become ready (rollout.ready_envs; benchmarks/worker/env_groups.py: a worker's sampling rate against
#      the env alone; two groups were measured there before: 0.97x one);
#   5. the same workers and learner beside as many processes stepping the env alone (benchmarks/scaling/scale_machine.py);
#   6. a worker policy's forward in each precision and layout on that CPU (benchmarks/policy_call/inference_forms.py);
#   7. the workers' policy on the GPU (rollout.compile.backend cuda): a step's policy call there beside the CPU
#      backends and a Ray round trip (benchmarks/worker/worker_inference.py), then Breakout at GPU_WORKERS workers acting on
#      their GPU shares, async, one group and half the copies ready (benchmarks/worker/env_groups.py);
#   8. start-up with GPU_WORKERS Breakout workers and the GPU learner: launch to first update beside Ray's own start
#      (benchmarks/startup/startup.py; target: first update <= Ray's floor + 3 s).
# Each stage has its own time limit, so one that hangs leaves the others their time. Results go to OUTDIR (argument 1,
# default benchmarks/results/gpu), with everything printed in OUTDIR/log.
#
#     bash benchmarks/gpu_checks.sh /tmp/gpu_results
#     GPU_WORKERS=1 STAGES="3" bash benchmarks/gpu_checks.sh /tmp/try    # a try of one stage on a CPU box
#     STAGES="6 5 3 2" GPU_TESTS="not through_ray" LEARNER_VARIANTS=auto bash benchmarks/gpu_checks.sh /tmp/r  # a subset
set -u
OUTDIR=${1:-benchmarks/results/gpu}
WORKERS=${GPU_WORKERS:-14}
STAGES=${STAGES-"4 7 8 2 1 3 5 6"}  # in this order; unset: every stage; empty: none (the machine lines only)
mkdir -p "$OUTDIR"
exec > >(tee -a "$OUTDIR/log") 2>&1
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
stage() { echo; echo "=== stage $1: $2 ($(date -u +%T), limit $3 s)"; }

echo "=== machine"
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
grep -m1 "model name" /proc/cpuinfo; nproc
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'AMX', torch.cpu._is_amx_tile_supported(), 'AVX512-BF16', torch.cpu._is_avx512_bf16_supported())"
python3 -c "import ray, gymnasium, ale_py, pydantic, onnxruntime, distrl.cli; print('ray', ray.__version__)" || exit 1

stage_1() {
    stage 1 "the learner's minibatch step (learner_step.py)" 150
    timeout 150 python3 benchmarks/learner/learner_step.py --models mlp cnn --repeats 3 --results-dir "$OUTDIR"
    echo "stage 1 exit $?"
}
stage_2() {
    stage 2 "the CUDA tests (pytest -m gpu${GPU_TESTS:+ -k $GPU_TESTS})" 200
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu ${GPU_TESTS:+-k "$GPU_TESTS"} tests/test_gpu.py \
        tests/test_learner.py tests/test_compile.py tests/test_worker_gpu.py
    echo "stage 2 exit $?"
}
stage_3() {
    stage 3 "the CNN learner on this machine's CPU (learner.py, 4 threads)" 130
    # LEARNER_VARIANTS: learner.py's variant names, separated by "|"
    IFS='|' read -ra variants <<< "${LEARNER_VARIANTS:-eager|auto|eager channels_last|eager bf16 channels_last}"
    CUDA_VISIBLE_DEVICES="" timeout 130 python3 benchmarks/learner/learner.py --models cnn --threads 4 --updates 3 \
        --variants "${variants[@]}" --results-dir "$OUTDIR"
    echo "stage 3 exit $?"
}
stage_4() {
    stage 4 "Breakout, $WORKERS workers, GPU learner, async, one group and half the copies ready (env_groups.py)" 220
    timeout 220 python3 benchmarks/worker/env_groups.py --pipelines async --stepping 1 ready --iterations 6 --env-seconds 3 \
        --set rollout.num_workers="$WORKERS" --set learner.num_gpus_per_learner="$(gpus)" --results-dir "$OUTDIR"
    echo "stage 4 exit $?"
}
stage_5() {
    stage 5 "Breakout, $WORKERS workers, GPU learner, async, beside the env alone (scale_machine.py)" 190
    timeout 190 python3 benchmarks/scaling/scale_machine.py --config configs/breakout.yaml --workers "$WORKERS" --iterations 10 \
        --env-seconds 10 --set learner.num_gpus_per_learner="$(gpus)" --set rollout.pipeline=async --results-dir "$OUTDIR"
    echo "stage 5 exit $?"
}
stage_6() {
    stage 6 "a worker policy's forward in each precision and layout, one thread (inference_forms.py)" 110
    CUDA_VISIBLE_DEVICES="" timeout 110 python3 benchmarks/policy_call/inference_forms.py --models cnn --batch-sizes 8 32 \
        --results-dir "$OUTDIR"
    echo "stage 6 exit $?"
}
stage_7() {
    stage 7 "the workers' policy on the GPU (worker_inference.py; env_groups.py with the cuda backend)" 300
    timeout 60 python3 benchmarks/worker/worker_inference.py --seconds 0.5 --repeats 3 --results-dir "$OUTDIR"
    echo "stage 7a exit $?"
    # The learner and the workers share the one GPU: half for the learner, the rest split among the workers.
    timeout 240 python3 benchmarks/worker/env_groups.py --pipelines async --stepping 1 ready --iterations 6 --env-seconds 3 \
        --set rollout.num_workers="$WORKERS" --set learner.num_gpus_per_learner=0.5 \
        --set rollout.compile.backend=cuda --set rollout.compile.strict=true \
        --set rollout.num_gpus_per_worker="$(python3 -c "print(round(0.5 / $WORKERS, 4))")" --results-dir "$OUTDIR"
    echo "stage 7b exit $?"
}
stage_8() {
    stage 8 "start-up, Breakout, $WORKERS workers, GPU learner (startup.py, 3 runs)" 180
    timeout 180 python3 benchmarks/startup/startup.py --config configs/breakout.yaml --runs 3 \
        --set rollout.num_workers="$WORKERS" --set learner.num_gpus_per_learner="$(gpus)" --results-dir "$OUTDIR"
    echo "stage 8 exit $?"
}
gpus() { python3 -c "import torch; print(int(torch.cuda.is_available()))"; }

for n in $STAGES; do "stage_$n"; done
echo "=== done $(date -u +%T)"
