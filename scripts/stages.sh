#!/usr/bin/env bash
# stages.sh runs `make STAGE` for each stage given, in order, prints each stage's
# wall time as it ends, and a table of all of them at the end (also when a stage
# fails, which stops the run with that stage's exit status; with KEEP_GOING=1
# the later stages run all the same and the first failure's status is the exit
# status, so one run reports every failing stage).
#
#   scripts/stages.sh fmt vet test-go
#   KEEP_GOING=1 scripts/stages.sh fmt vet test-go
set -uo pipefail
names=() secs=() codes=() status=0 first=0
summary() {
  echo
  echo "== make test: time per stage =="
  local total=0
  for i in "${!names[@]}"; do
    printf '  %-14s %5ds  (%dm%02ds)%s\n' "${names[$i]}" "${secs[$i]}" $((secs[i] / 60)) $((secs[i] % 60)) \
      "$([ "${codes[$i]}" = 0 ] || echo "  FAILED (exit ${codes[$i]})")"
    total=$((total + secs[i]))
  done
  printf '  %-14s %5ds  (%dm%02ds)\n' total "$total" $((total / 60)) $((total % 60))
}
trap summary EXIT
for stage in "$@"; do
  echo "== stage $stage =="
  start=$(date +%s)
  make --no-print-directory "$stage"
  status=$?
  names+=("$stage")
  codes+=("$status")
  secs+=($(($(date +%s) - start)))
  echo "== stage $stage: ${secs[-1]}s (exit $status) =="
  if [ "$status" != 0 ]; then
    [ "${KEEP_GOING:-0}" = 1 ] || exit "$status"
    [ "$first" != 0 ] || first=$status
  fi
done
exit "$first"
