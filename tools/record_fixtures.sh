#!/usr/bin/env bash
# Records the real fixtures of fixtures/nvidia on a machine with an NVIDIA GPU and PyTorch:
# nvidia-smi's views of the card, then one `gputop --record` per workload of
# tools/fixture_workloads.py, each with the workload's own log and the recorder's CPU time.
#
#   tools/record_fixtures.sh OUTDIR [CASE...]   (from the repository root; PYTHON=python3)
#
# CASEs: idle healthy starved fragmented near_oom leak leak_busy host_bound copy_bound
# copy_pageable healthy_eval power_capped (default: the first six). power_capped runs healthy
# with GPU 0's power limit lowered to POWER_CAP watts (default 350; nvidia-smi -pl, as root),
# and puts the default limit back after.
set -u
out=${1:?usage: tools/record_fixtures.sh OUTDIR [CASE...]}
shift
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(idle healthy starved fragmented near_oom leak)
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

nvidia-smi > "$out/nvidia-smi.txt" 2>&1
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1
nvidia-smi -q -x > "$out/nvidia-smi-q.xml" 2>&1
nvidia-smi topo -m > "$out/nvidia-smi-topo.txt" 2>&1
{
  uname -r
  nvidia-smi --query-gpu=name,driver_version,vbios_version --format=csv,noheader
  "$py" -c 'import sys, torch, pynvml, psutil; print(sys.version.split()[0], "torch", torch.__version__, "nvidia-ml-py", pynvml.__version__ if hasattr(pynvml, "__version__") else "?", "psutil", psutil.__version__)'
} > "$out/versions.txt" 2>&1

# usage NAME PID: the CPU time and peak RSS of a running process, from /proc.
usage() {
  local ticks rss
  ticks=$(awk '{print $14 + $15}' "/proc/$2/stat" 2>/dev/null)
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$2/status" 2>/dev/null)
  echo "$1: $(awk -v t="${ticks:-0}" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz}') s CPU, ${rss:-?} KiB peak RSS"
}

# One-shot: wall time on the real driver (the first run pays the driver's start).
for i in 1 2 3 4 5; do
  start=$(date +%s.%N)
  "$py" -m gputop --once > "$out/once.txt" 2>&1
  echo "once $i: $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.3f", b - a}') s wall" >> "$out/once-times.txt"
done
"$py" -m gputop --once --json > "$out/once.json" 2>&1

# record NAME SECONDS [probe] : records while the workload runs, then 3 s of its aftermath.
record() {
  local name=$1 secs=$2 runner=() workload=$1
  [ "${3:-}" = probe ] && runner=(-m gputop.probe)
  : > "$out/$name.log"
  if [ "$name" = power_capped ]; then
    workload=healthy
    nvidia-smi -i 0 -pl "${POWER_CAP:-350}" >> "$out/$name.log" 2>&1 \
      || { echo "$name: the power limit could not be set"; return; }
  fi
  "$py" -m gputop --record "$out/$name.jsonl.gz" --headless 2> "$out/$name.recorder.txt" &
  local rec=$!
  local began=$SECONDS
  sleep 3
  echo "== $name: $(date -u +%FT%TZ)"
  if [ "$name" = idle ]; then
    sleep "$secs"
  else
    timeout $((secs + 60)) "$py" "${runner[@]}" tools/fixture_workloads.py "$workload" \
      --seconds "$secs" >> "$out/$name.log" 2>&1 &
    local job=$!
    sleep $((secs / 2 + 8))  # the workload's start (torch, CUDA) takes seconds
    nvidia-smi -q -x > "$out/$name.nvidia-smi-q.xml" 2>&1
    wait "$job" || echo "$name: workload exit $?"
  fi
  sleep 3
  usage "$name recorder over $((SECONDS - began)) s" "$rec" >> "$out/recorder-usage.txt"
  kill -TERM "$rec" 2>/dev/null
  wait "$rec"
  echo "   recorder exit $?: $(tail -1 "$out/$name.recorder.txt")"
  if [ "$name" = power_capped ]; then
    local default
    default=$(nvidia-smi -i 0 --query-gpu=power.default_limit --format=csv,noheader,nounits)
    nvidia-smi -i 0 -pl "${default%.*}" >> "$out/$name.log" 2>&1
  fi
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
}

declare -A seconds=([idle]=15 [healthy]=40 [starved]=50 [fragmented]=40 [near_oom]=45 [leak]=30
                    [leak_busy]=45 [host_bound]=50 [copy_bound]=80 [copy_pageable]=45
                    [healthy_eval]=60 [power_capped]=100)
for case in "${cases[@]}"; do
  # The starved loop is timed through the runner, which patches DataLoader.__iter__.
  record "$case" "${seconds[$case]:?unknown case $case}" $([ "$case" = starved ] && echo probe)
done
