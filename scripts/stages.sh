#!/usr/bin/env bash
# stages.sh runs `make STAGE` for each stage given, in order, prints each stage's
# wall time as it ends, and a table of all of them at the end (also when a stage
# fails, which stops the run with that stage's exit status).
#
#   scripts/stages.sh fmt vet test-go
set -uo pipefail
names=() secs=() status=0
summary() {
  echo
  echo "== make test: time per stage =="
  local total=0
  for i in "${!names[@]}"; do
    printf '  %-14s %5ds  (%dm%02ds)\n' "${names[$i]}" "${secs[$i]}" $((secs[i] / 60)) $((secs[i] % 60))
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
  secs+=($(($(date +%s) - start)))
  echo "== stage $stage: ${secs[-1]}s (exit $status) =="
  [ "$status" = 0 ] || exit "$status"
done
