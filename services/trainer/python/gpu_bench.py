#!/usr/bin/python3
"""GPU benchmark of the training step: the resident worker (worker.py, the
model loaded once) against one train_step.py process per iteration, on a
randomly initialised ~1.1B-parameter Llama (TinyLlama's shape: hidden 2048,
22 layers, 32 heads, 4 KV heads) with LoRA r 16 and gradient checkpointing.
Nothing is downloaded: the tokenizer is a byte-level BPE trained here.

For each path it prints per iteration: wall time, optimisation-step time,
fixed cost (wall − steps), tokens/s over the steps, and peak GPU memory;
then the fixed cost per iteration of each path side by side. The resident
worker also serves the model it trains (--serve-port): --serve-requests
chat completions of --serve-tokens new tokens each, one at a time, give
the generation tokens/s of serving from the worker (transformers'
generate, no batching: the fallback where vLLM is absent). Meant to take
under 5 minutes on one H200 with the defaults; the last line is a JSON
summary.

Usage: python3 gpu_bench.py [--iterations 3] [--per-process 2] [--batch 32] [--tokens 3000] [--steps 1] [--work DIR]
Exits 2 without CUDA unless --allow-cpu or --tiny (a 2-layer model and a
small batch, for the CPU test of the script).
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tinyllama  # noqa: E402

WORDS = ("patient creatinine clearance weight height age serum mg dL mL min kg cm sodium potassium glucose "
         "print import pandas numpy answer round def return for in range if else value result error").split()


def text(rng, n):
    return " ".join(rng.choice(WORDS) + (str(rng.randint(0, 999)) if rng.random() < 0.2 else "") for _ in range(n))


def build(path, a):
    import torch
    rng = random.Random(0)
    return tinyllama.build(path, [text(rng, 200) for _ in range(200)], 2000, hidden=a.hidden, layers=a.layers,
                           intermediate=int(a.hidden * 2.75), heads=max(1, a.hidden // 64), kv_heads=max(1, a.hidden // 512),
                           model_vocab=None if a.tiny else 32000, max_positions=8192,
                           dtype=torch.bfloat16 if torch.cuda.is_available() else None)


def batch(path, a, tok_per_word=1.3):
    """A GRPO batch: groups of 8 samples, each a prompt and 3 turns, about
    a.tokens tokens long."""
    rng = random.Random(1)
    words = int(a.tokens / tok_per_word / 8)
    with open(path, "w") as f:
        for i in range(a.batch):
            comp = []
            for t in range(3):
                comp += [{"role": "assistant", "content": text(rng, words)}, {"role": "user", "content": text(rng, words)}]
            comp.append({"role": "assistant", "content": text(rng, words)})
            rec = {"prompt": [{"role": "system", "content": text(rng, words)}, {"role": "user", "content": text(rng, words)}],
                   "completion": comp, "completion_mask": [1 if m["role"] == "assistant" else 0 for m in comp],
                   "advantage": 1.0 if i % 2 else -1.0, "weight": 1.0, "group_id": "g%d" % (i // 8)}
            f.write(json.dumps(rec) + "\n")


def row(kind, it, wall, m, save_s=None):
    """One iteration's figures. fixed_s = wall − steps_s, split into
    prepare_s (inside the step call but before the optimisation steps:
    tokenising, the GRPO old/reference log-prob forwards, evaluations:
    compute, so it shrinks with the device) and the rest: for the resident
    worker save_s (the adapter and optimiser state) and other_s (request
    and batch handling); for one process per iteration start_s (the
    interpreter, imports, model load, save: what the resident worker
    removes)."""
    steps_s = m.get("steps_s") or 0.0
    toks = m.get("tokens_trained") or 0
    r = {"path": kind, "iteration": it, "wall_s": round(wall, 2), "steps_s": round(steps_s, 2),
         "fixed_s": round(wall - steps_s, 2), "tokens_per_s": round(toks / steps_s) if steps_s else None,
         "peak_mem_gb": m.get("peak_mem_gb")}
    if save_s is not None:  # resident: m["seconds"] is the step call
        r["prepare_s"] = round(m.get("seconds", steps_s) - steps_s, 2)
        r["save_s"] = round(save_s, 2)
        r["other_s"] = round(wall - m.get("seconds", steps_s) - save_s, 2)
    else:  # one process: m["seconds"] runs from after the imports to after the save
        r["start_s"] = round(wall - m.get("seconds", wall), 2)
        r["load_prepare_save_s"] = round(m.get("seconds", wall) - steps_s, 2)
    return r


def serve_bench(port, a):
    """Chat completions from the resident worker's server, one at a time:
    generated tokens per second (sampling at T 0.6, as the online loop)."""
    import urllib.request
    rng = random.Random(2)
    toks, t = 0, time.time()
    for i in range(a.serve_requests):
        body = {"model": "v0", "messages": [{"role": "system", "content": text(rng, 100)},
                                            {"role": "user", "content": text(rng, 200)}],
                "temperature": 0.6, "max_tokens": a.serve_tokens, "seed": i, "logprobs": True}
        req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            ans = json.load(r)
        toks += ans["usage"]["completion_tokens"]
    dt = time.time() - t
    return {"serve_requests": a.serve_requests, "serve_tokens": toks, "serve_s": round(dt, 2),
            "serve_tokens_per_s": round(toks / dt, 1) if dt else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=3, help="iterations through the resident worker")
    p.add_argument("--per-process", type=int, default=2, help="iterations as one train_step.py process each")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--tokens", type=int, default=3000, help="tokens per sample (about)")
    p.add_argument("--steps", type=int, default=1, help="optimisation steps per iteration")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=22)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--work", default="")
    p.add_argument("--serve-requests", type=int, default=4)
    p.add_argument("--serve-tokens", type=int, default=256)
    p.add_argument("--allow-cpu", action="store_true")
    p.add_argument("--tiny", action="store_true", help="tiny sizes, on the CPU if there is no GPU (the script's test)")
    a = p.parse_args()
    if a.tiny:
        a.hidden, a.layers, a.batch, a.tokens, a.iterations, a.per_process = 64, 2, 4, 200, 2, 1
        a.micro_batch, a.serve_requests, a.serve_tokens, a.allow_cpu = 2, 2, 8, True
    import torch
    if not torch.cuda.is_available() and not a.allow_cpu:
        print("gpu_bench: no CUDA device (use --allow-cpu with tiny sizes to try it)", file=sys.stderr)
        return 2
    work = a.work or tempfile.mkdtemp(prefix="medgym-gpu-bench-")
    model = os.path.join(work, "model")
    t0 = time.time()
    nparams = build(model, a)
    data = os.path.join(work, "batch.jsonl")
    batch(data, a)
    print(json.dumps({"params": nparams, "build_s": round(time.time() - t0, 1), "batch": a.batch, "tokens": a.tokens,
                      "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}), flush=True)
    recipe = {"steps": a.steps, "micro_batch": a.micro_batch, "max_len": 8192}
    common = ["--backend", "hf", "--model", model, "--grad-ckpt"]
    rows = []

    # Resident: one worker, the model loaded once.
    t = time.time()
    w = subprocess.Popen([sys.executable, os.path.join(HERE, "worker.py"), "--serve-port", "0", "--serve-name", "v0"] + common,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = json.loads(w.stdout.readline())
    load = time.time() - t
    print(json.dumps({"resident_load_s": round(load, 1), "ready": ready}), flush=True)
    for it in range(a.iterations):
        t = time.time()
        w.stdin.write(json.dumps({"id": it, "op": "train", "mode": "grpo", "data": data, "recipe": recipe,
                                  "out": os.path.join(work, "resident-%d" % it), "evaluate": False}) + "\n")
        w.stdin.flush()
        ans = json.loads(w.stdout.readline())
        if not ans.get("ok"):
            print("gpu_bench: worker: %s" % ans, file=sys.stderr)
            return 1
        rows.append(row("resident", it, time.time() - t, ans["metrics"], ans.get("save_s", 0.0)))
        print(json.dumps(rows[-1]), flush=True)
    gen = serve_bench(ready["serve_port"], a)
    print(json.dumps(gen), flush=True)
    w.stdin.write(json.dumps({"op": "shutdown"}) + "\n")
    w.stdin.flush()
    w.wait()

    # One process per iteration (the old online loop).
    for it in range(a.per_process):
        t = time.time()
        mpath = os.path.join(work, "proc-%d.json" % it)
        cmd = [sys.executable, os.path.join(HERE, "train_step.py"), "--mode", "grpo", "--data", data, "--out",
               os.path.join(work, "proc-%d" % it), "--metrics", mpath, "--steps", str(a.steps),
               "--micro-batch", str(a.micro_batch)] + common
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            print("gpu_bench: train_step: %s" % res.stderr[-2000:], file=sys.stderr)
            return 1
        with open(mpath) as f:
            rows.append(row("per-process", it, time.time() - t, json.load(f)))
        print(json.dumps(rows[-1]), flush=True)

    def mean(kind, key):
        v = [r[key] for r in rows if r["path"] == kind and r[key] is not None]
        return round(sum(v) / len(v), 2) if v else None

    print(json.dumps({"summary": {
        "resident_fixed_s_per_iteration": mean("resident", "fixed_s"), "resident_load_s_once": round(load, 1),
        "resident_prepare_s": mean("resident", "prepare_s"), "resident_save_s": mean("resident", "save_s"),
        "resident_other_s": mean("resident", "other_s"), "per_process_start_s": mean("per-process", "start_s"),
        "per_process_fixed_s_per_iteration": mean("per-process", "fixed_s"),
        "step_s": mean("resident", "steps_s"), "tokens_per_s": mean("resident", "tokens_per_s"),
        "serve_tokens_per_s": gen["serve_tokens_per_s"],
        "peak_mem_gb": max((r["peak_mem_gb"] or 0) for r in rows), "total_s": round(time.time() - t0, 1)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
