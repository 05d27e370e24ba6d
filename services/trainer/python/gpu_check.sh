#!/bin/sh
# The trainer's GPU check, for a session with a device machine: hf_check.py
# (the hf path: losses, resident worker, serving, resume) then gpu_bench.py
# (a random ~1.1B Llama: resident worker vs one process per iteration, and
# generation from the worker's server), one after the other. Both together
# are meant to stay under 5 minutes on one H200. The last line is a JSON
# summary with the figures services/trainer/README.md reports.
#
#   services/trainer/python/gpu_check.sh [--tiny] [--work DIR]
#
# --tiny: tiny sizes on whatever device there is (the CPU test,
# TestGPUCheckTiny). Python: $MEDGYM_PYTHON, else the repository's .venv,
# else python3. Exits non-zero when either script fails.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
tiny=""
work=""
while [ $# -gt 0 ]; do
	case "$1" in
	--tiny) tiny="--tiny" ;;
	--work) work="$2"; shift ;;
	*) echo "gpu_check: unknown argument $1 (want --tiny, --work DIR)" >&2; exit 2 ;;
	esac
	shift
done
py=${MEDGYM_PYTHON:-}
if [ -z "$py" ]; then
	if [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"; else py=python3; fi
fi
[ -n "$work" ] || work=$(mktemp -d "${TMPDIR:-/tmp}/medgym-gpu-check.XXXXXX")
mkdir -p "$work"
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
start=$(date +%s)
echo "== hf_check.py"
"$py" "$here/hf_check.py" --work "$work/hf" | tee "$work/hf_check.json"
mid=$(date +%s)
echo "== gpu_bench.py $tiny"
if [ -n "$tiny" ]; then
	"$py" "$here/gpu_bench.py" --work "$work/bench" --tiny | tee "$work/gpu_bench.jsonl"
else
	"$py" "$here/gpu_bench.py" --work "$work/bench" | tee "$work/gpu_bench.jsonl"
fi
end=$(date +%s)
"$py" - "$work" "$((mid - start))" "$((end - mid))" <<'PY'
import json, sys
work, hf_s, bench_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hf = json.load(open(work + "/hf_check.json"))
bench = [json.loads(l) for l in open(work + "/gpu_bench.jsonl") if l.startswith("{")]
summary = next((b["summary"] for b in bench if "summary" in b), {})
head = bench[0] if bench else {}
print(json.dumps({"gpu_check": {"ok": bool(hf.get("ok")) and bool(summary), "device": hf.get("device"),
                                "versions": {k: hf.get(k) for k in ("torch", "transformers", "peft")},
                                "hf_check_s": hf_s, "gpu_bench_s": bench_s, "params": head.get("params"),
                                "sft_loss": hf.get("sft_loss"), "dpo_margin": hf.get("dpo_margin"),
                                "grpo_pos_logp": hf.get("grpo_pos_logp"), "serving": hf.get("serving"),
                                "bench": summary}}))
PY
