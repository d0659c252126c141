#!/usr/bin/env bash
# The GPU checks of a session lent a device machine, as one call of the device tool's `run`
# (it starts bare, with torch, transformers and pytest but no gymnasium, MuJoCo or ALE, and no
# package registry). First, here, download the wheels it lacks (CPython 3.12 there):
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     -d .whl gymnasium==1.4.0 farama-notifications==0.0.6 mujoco==3.3.7 glfw==2.11.0 pyopengl==3.1.10 ale-py==0.12.1
#
# then run `bash benchmarks/gpu_session.sh [STAGE...]` there with carry [".whl"] (14 MB; EnvPool's
# wheel and assets, 115 MB, exceed what a call carries). Stages: tests gpu seeds atari rlhf (all by
# default). 2026-11-26 on an H200 they took 95, 202 (before gpu.py's CPU row), 190 (94 once the
# stacked seeds left at their solve), 38 and 29 s: near one call's 10-minute limit, so split them
# over two calls on the warm machine if need be.
# The atari stage trains Breakout on the atari preset's backend, ale-py's C++ vector env (it
# comes with the ale-py wheel and needs no OpenCV), with 8 and with 32 envs, each run followed by
# the env-only ceiling of the same envs in the same process (150 s at most).
# Two stages run only when named, each one call: `pong` (Pong from scratch, stopped at a last-20 mean
# of 20 or after 300 s of wall time, then 10 deterministic games) and `breakout10m` (a 10M-step
# Breakout run at the atari preset's settings, 480 s per call: a fresh one the first time, then
# resumed from runs/breakout10m). Carry [".whl", "runs/breakout10m"] to a call after the first,
# having copied the folder the last call returned (under its files_at, breakout10m/) to
# runs/breakout10m here; the stage leaves the run's folder in $OUT/breakout10m.
# `bash benchmarks/gpu_session.sh --dry-run [STAGE...]` runs each stage's tiny CPU version here (all
# seven by default: ~7 min on 2 busy cores, a stage 15 s to 3 min), with this machine's packages
# (PYTHON names the interpreter, python3 by default): the same scripts through the same code with
# --device cpu and smaller budgets, the check before a device call. The tests stage runs the same
# test selection (the CUDA tests skip, saying so; a test id that no longer exists fails it), gpu.py
# --quick says which CUDA-only rows it skips, rlhf times the tiny model only. `--print` (with or
# without --dry-run) prints each stage's command and runs nothing.
# Each stage runs under its own timeout and writes its log to $OUT: one failure leaves the others, and
# the call ends with exit 1 and a line naming the failed stages.
# Leave MUJOCO_GL unset: with =egl, `import mujoco` fails there (no libEGL in the image).
set -o pipefail
ALL="tests gpu seeds atari rlhf"
NAMED_ONLY="pong breakout10m"
DRY=0 PRINT=0
while [[ ${1:-} == --dry-run || ${1:-} == --print ]]; do
  if [[ $1 == --dry-run ]]; then DRY=1; else PRINT=1; fi
  shift
done
for name in "$@"; do
  [[ " $ALL $NAMED_ONLY " == *" $name "* ]] || {
    echo "gpu_session.sh: error: unknown stage '$name': pick from $ALL $NAMED_ONLY" >&2; exit 2; }
done
if ((DRY)); then STAGES=" ${*:-$ALL $NAMED_ONLY} "; else STAGES=" ${*:-$ALL} "; fi
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
if ((DRY)); then
  export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}
elif ((!PRINT)); then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
  export PYTHONPATH=/tmp/site:$PWD/src:$PWD
fi
OUT=${OUT:-/tmp/gpu_session}
((PRINT)) || mkdir -p "$OUT"

FAILED=""
stage() {
  local name=$1 limit=$2
  shift 2
  [[ $STAGES == *" $name "* ]] || return 0
  if ((PRINT)); then
    echo "$name (limit ${limit}s): $*"
    return 0
  fi
  echo "=== $name (limit ${limit}s) $(date +%T)"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name rc=$rc in $((SECONDS - t0))s"
  tail -n 40 "$OUT/$name.log"
  ((rc == 0)) || FAILED+=" $name"
}

finish() {
  [[ -z $FAILED ]] || { echo "gpu_session.sh: failed stages:$FAILED (their logs in $OUT)" >&2; exit 1; }
  exit 0
}

# The CUDA tests: on a CPU they skip, and a test id that no longer exists fails the stage there too.
CUDA_TESTS=(tests/training/test_cuda_graphs.py tests/training/test_optim.py
  "tests/envs/test_tensor_envs.py::test_cuda_steps_without_host_sync_and_matches_cpu"
  "tests/training/test_compile.py::test_inductor_compiled_run_matches_eager_on_first_update")
((DRY || PRINT)) || nvidia-smi -L
stage tests 150 "$PYTHON" -m pytest -q -rs -p no:cacheprovider --timeout 100 "${CUDA_TESTS[@]}"
cd benchmarks || exit 1
if ((DRY)); then
  stage gpu 240 "$PYTHON" gpu.py --device cpu --quick
  stage seeds 120 "$PYTHON" seed_stack.py --seeds 2 --device cpu --single-seeds 2 --sb3-seeds 0
  stage atari 120 "$PYTHON" atari.py --games BreakoutNoFrameskip-v4 --device cpu --num-envs 2 --total-timesteps 256 --ceiling-seconds 0.5
  stage rlhf 120 "$PYTHON" rlhf_throughput.py --device cpu --steps 2 --models tiny
  ((PRINT)) || rm -rf "$OUT/pong" "$OUT/breakout10m"  # a dry run's runs start over
  stage pong 300 "$PYTHON" atari_long.py "$OUT/pong" --seconds 200 --eval-games 1 -- PongNoFrameskip-v4 --device cpu --num-envs 2 \
    --num-steps 32 --total-timesteps 256 --stop-return 20 --stop-window 20
  # a first call stopped early, then one that resumes it to its end
  stage breakout10m 300 bash -c "'$PYTHON' atari_long.py '$OUT/breakout10m' --seconds 1 -- BreakoutNoFrameskip-v4 \
    --device cpu --num-envs 2 --num-steps 32 --total-timesteps 512 && \
    '$PYTHON' atari_long.py '$OUT/breakout10m' --seconds 200 --eval-games 1"
  finish
fi
stage gpu 300 "$PYTHON" gpu.py --halfcheetah-steps 40960
stage seeds 240 "$PYTHON" seed_stack.py --seeds 1024 --device cuda --single-seeds 2 --sb3-seeds 0
stage atari 150 bash -c "'$PYTHON' atari.py --games BreakoutNoFrameskip-v4 --device cuda --num-envs 8 --total-timesteps 65536 --ceiling-seconds 10 && \
  '$PYTHON' atari.py --games BreakoutNoFrameskip-v4 --device cuda --num-envs 32 --total-timesteps 131072 --ceiling-seconds 10"
stage rlhf 90 "$PYTHON" rlhf_throughput.py --device cuda --steps 3
# Named only. Pong's settings for speed: 64 envs (the preset's other settings); 300 s of training
# within the 330 s the stage allows, so start-up and the save count in the 5 minutes.
stage pong 420 "$PYTHON" atari_long.py "$OUT/pong" --seconds 300 -- PongNoFrameskip-v4 --device cuda --num-envs 64 \
  --total-timesteps 5000000 --stop-return 20 --stop-window 20
if [[ $STAGES == *" breakout10m "* ]]; then
  ((PRINT)) || { [[ -d ../runs/breakout10m ]] && cp -r ../runs/breakout10m "$OUT/breakout10m"; }
  if [[ -d $OUT/breakout10m || -d ../runs/breakout10m ]]; then set --; else set -- -- BreakoutNoFrameskip-v4 --device cuda; fi
  stage breakout10m 590 "$PYTHON" atari_long.py "$OUT/breakout10m" --seconds 480 "$@"
fi
finish
