#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and initcheck over GPU test binaries (issue 16), for the
# GPU round (scripts/gpu_round.sh sanitize). Writes LOG: first line the verdict, then a summary
# table (per tool and suite: errors found, exit status, seconds), then the reports of every run
# that found errors or did not exit 0.
#   scripts/gpu_sanitize.sh BIN_DIR LOG SUITE...
# Exit status: the number of runs that found errors or failed (a run that only timed out is
# counted and marked `timeout`: its coverage is partial).
# Time bound: the whole step within FP8MOE_SANITIZE_BUDGET seconds (default 540: the device tool
# runs one command for at most 10 minutes), each run within its share of what is left (memcheck
# slows kernels 2-10x, racecheck and initcheck 10-100x: a huge suite times out with the errors it
# found so far), and never past FP8MOE_SANITIZE_TIMEOUT (default 300 s) alone.
# FP8MOE_SANITIZE_TOOLS picks the tools (default "memcheck racecheck initcheck"): racecheck alone
# can then have the whole budget of one device call.
set -uo pipefail
bin=$1
log=$2
shift 2
suites=("$@")

san=$(command -v compute-sanitizer || true)
for d in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-*; do
  [[ -z $san && -n $d && -x $d/bin/compute-sanitizer ]] && san=$d/bin/compute-sanitizer
done
if [[ -z $san ]]; then
  echo "sanitize: FAILED: compute-sanitizer not found (PATH, CUDA_HOME, /usr/local/cuda*/bin): no check ran" >"$log"
  exit 1
fi

work=$(mktemp -d)
summary=$work/summary
printf '%-10s %-24s %7s %4s %8s  %s\n' tool suite errors rc seconds note >"$summary"
bad=0 runs=0
budget=${FP8MOE_SANITIZE_BUDGET:-540}
cap=${FP8MOE_SANITIZE_TIMEOUT:-300}
read -r -a tools <<<"${FP8MOE_SANITIZE_TOOLS:-memcheck racecheck initcheck}"
total=$((${#tools[@]} * ${#suites[@]}))
deadline=$((SECONDS + budget))
for tool in "${tools[@]}"; do
  case $tool in
    memcheck) opts=() ;;
    # hazard: errors and warnings of shared-memory races (analysis only summarises them).
    racecheck) opts=(--racecheck-report hazard) ;;
    initcheck) opts=() ;;
  esac
  for t in "${suites[@]}"; do
    # This run's share of the time left (at least 10 s), at most the cap.
    limit=$(((deadline - SECONDS) / (total - runs)))
    ((limit < 10)) && limit=10
    ((limit > cap)) && limit=$cap
    out=$work/$tool.$t.log
    start=$SECONDS
    # --error-exitcode: a run that finds errors exits 99 whatever the tests say;
    # --target-processes all: suites that start helper processes are checked too.
    timeout -k 30 "$limit" "$san" --tool "$tool" "${opts[@]}" --target-processes all --error-exitcode 99 \
      --print-limit 50 "$bin/$t" >"$out" 2>&1
    rc=$?
    secs=$((SECONDS - start))
    runs=$((runs + 1))
    # memcheck/initcheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: H hazards
    # displayed (E errors, W warnings)"; several summaries (child processes) are added up.
    errors=$(sed -n -e 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' \
                    -e 's/.*RACECHECK SUMMARY: .*(\([0-9][0-9]*\) error.*/\1/p' "$out" | awk '{s += $1} END {print s + 0}')
    note=
    # A host-only suite makes no CUDA call: the tool has nothing to check and exits 255 after the
    # suite ran; that is no error when the suite itself passed.
    if [[ $rc == 255 ]] && grep -q 'terminated before first instrumented API call' "$out" &&
       grep -q 'Status: SUCCESS' "$out"; then
      rc=0
      note="no CUDA calls: nothing to check"
    fi
    case $rc in
      0) ;;
      77) note="skipped: no device" ;;
      99) note="errors found" ;;
      124 | 137) note="timeout after ${limit}s: partial coverage" ;;
      *) note="the suite failed under the tool" ;;
    esac
    ((errors > 0)) && [[ -z $note ]] && note="errors found"
    if [[ $rc != 0 || $errors -gt 0 ]]; then
      bad=$((bad + 1))
      { echo "== $tool $t: rc=$rc errors=$errors ($note)"; grep -E '^=========' "$out" | head -200; tail -20 "$out"; } >>"$work/details"
    fi
    printf '%-10s %-24s %7s %4s %8s  %s\n' "$tool" "$t" "$errors" "$rc" "$secs" "$note" >>"$summary"
  done
done
{
  if ((bad == 0)); then
    echo "sanitize: clean: $runs runs (${tools[*]} x ${#suites[@]} suites) found no errors"
  else
    echo "sanitize: FAILED: $bad of $runs runs found errors, failed or timed out (details below the table)"
  fi
  echo "# $("$san" --version 2>&1 | tail -1)"
  cat "$summary"
  [[ -f $work/details ]] && cat "$work/details"
} >"$log"
rm -rf "$work"
exit "$bad"
