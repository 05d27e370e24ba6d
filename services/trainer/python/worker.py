#!/usr/bin/python3
"""The resident medgym trainer: loads the base model once and keeps the
optimiser state across training steps, taking requests as JSON lines on
stdin and answering each with one JSON line on stdout (docs/adr/0012-resident-trainer.md and
services/trainer/README.md, "The resident worker").

  python3 worker.py --backend hf --model MODEL [--init DIR] [--lora-r 16] [--grad-ckpt]

On start it writes {"ready": true, "backend": ..., "model": ..., "load_s": ...,
"init": DIR, "optimizer_restored": bool}. Requests (one object a line; "id"
is echoed back):

  {"id": 1, "op": "train", "mode": "sft|dpo|grpo", "data": "BATCH.jsonl", "out": "DIR",
   "recipe": {"lr": ..., "steps": ..., "beta": ..., "kl_coef": ..., "max_len": ...}, "evaluate": true}
      trains on the batch and saves the adapter and optimiser state to out;
      answers {"id": 1, "ok": true, "metrics": {...}, "save_s": ...}
  {"id": 2, "op": "score", "data": "VERIFIER.jsonl", "out": "SCORES.jsonl", "max_len": N}
      scores each record (a rendered trajectory, trainer build's verifier/
      layout) with the current model as a trajectory verifier: P(YES) over
      YES/NO; writes {"index", "episode_id", "score"} lines to out and
      answers {"ok": true, "scored": n, "unscored": m}
  {"id": 3, "op": "ping"}      answers {"ok": true, "backend": ..., "steps_done": n}
  {"id": 4, "op": "shutdown"}  answers {"ok": true} and exits 0

A request that cannot be served (malformed JSON, unknown op, a missing
file, a record without the fields its mode needs) is answered
{"ok": false, "error": "..."} and the worker goes on with the model as it
was. Logs go to stderr only: stdout carries the protocol.
"""

import argparse
import json
import os
import random
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import train_step  # noqa: E402

RECIPE_KEYS = ("lr", "beta", "kl_coef", "clip_eps", "steps", "agg", "max_len", "micro_batch")


class BadRequest(Exception):
    pass


def serve(tr, inp, out):
    steps_done = 0

    def reply(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    for line in inp:
        if not line.strip():
            continue
        rid = None
        try:
            try:
                req = json.loads(line)
            except ValueError as e:
                raise BadRequest("malformed request: %s" % e)
            if not isinstance(req, dict):
                raise BadRequest("a request is a JSON object")
            rid = req.get("id")
            op = req.get("op")
            if op == "ping":
                reply({"id": rid, "ok": True, "backend": tr.be.name, "steps_done": steps_done})
            elif op == "shutdown":
                reply({"id": rid, "ok": True})
                return 0
            elif op == "score":
                reply(dict(score(tr, req), id=rid, ok=True))
            elif op == "train":
                m = train(tr, req)
                steps_done += m["metrics"].get("steps", 0)
                reply(dict(m, id=rid, ok=True))
            else:
                raise BadRequest("unknown op %r (want train, score, ping or shutdown)" % op)
        except BadRequest as e:
            reply({"id": rid, "ok": False, "error": str(e)})
        except (OSError, ValueError, KeyError, TypeError, FloatingPointError) as e:
            print(traceback.format_exc(), file=sys.stderr)
            reply({"id": rid, "ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    return 0


def train(tr, req):
    mode = req.get("mode")
    if mode not in ("sft", "dpo", "grpo"):
        raise BadRequest("mode %r (want sft, dpo or grpo)" % mode)
    data, out = req.get("data"), req.get("out")
    if not data or not out:
        raise BadRequest("train needs data and out")
    recipe = req.get("recipe") or {}
    unknown = set(recipe) - set(RECIPE_KEYS)
    if unknown:
        raise BadRequest("unknown recipe keys %s" % sorted(unknown))
    recs = train_step.read_jsonl(data)
    need = {"sft": ("messages", "loss_mask"), "dpo": ("prompt", "chosen", "rejected"),
            "grpo": ("prompt", "completion", "completion_mask", "advantage")}[mode]
    for i, r in enumerate(recs):
        missing = [k for k in need if k not in r]
        if missing:
            raise BadRequest("%s record %d lacks %s" % (mode, i + 1, ", ".join(missing)))
    t0 = time.time()
    metrics = tr.step(mode, recs, {k: recipe.get(k) for k in RECIPE_KEYS}, evaluate=req.get("evaluate", True))
    t1 = time.time()
    tr.save(out)
    metrics["out"] = out
    return {"metrics": metrics, "train_s": t1 - t0, "save_s": time.time() - t1}


def score(tr, req):
    data, out = req.get("data"), req.get("out")
    if not data or not out:
        raise BadRequest("score needs data and out")
    recs = train_step.read_jsonl(data)
    for i, r in enumerate(recs):
        if not isinstance(r.get("messages"), list) or not any(m.get("role") == "user" for m in r["messages"]):
            raise BadRequest("score record %d has no user message" % (i + 1))
    t0 = time.time()
    scores = tr.score(recs, req.get("max_len") or train_step.DEFAULT_MAX_LEN)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".tmp", "w") as f:
        for i, (r, sc) in enumerate(zip(recs, scores)):
            f.write(json.dumps({"index": i, "episode_id": r.get("episode_id", ""), "run_id": r.get("run_id", ""),
                                "score": sc}) + "\n")
    os.replace(out + ".tmp", out)
    return {"scored": sum(s is not None for s in scores), "unscored": sum(s is None for s in scores),
            "score_s": time.time() - t0}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    train_step.add_common(p)
    args = p.parse_args(argv)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    t0 = time.time()
    tr = train_step.Trainer(args)
    restored = tr.load_optimizer(args.init)
    sys.stdout.write(json.dumps({"ready": True, "backend": tr.be.name, "model": args.model, "init": args.init,
                                 "optimizer_restored": restored, "load_s": time.time() - t0}) + "\n")
    sys.stdout.flush()
    return serve(tr, sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
