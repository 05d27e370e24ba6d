#!/usr/bin/python3
"""The resident medgym trainer: loads the base model once and keeps the
optimiser state across training steps, taking requests as JSON lines on
stdin and answering each with one JSON line on stdout (docs/adr/0012-resident-trainer.md and
services/trainer/README.md, "The resident worker").

  python3 worker.py --backend hf --model MODEL [--init DIR] [--lora-r 16] [--grad-ckpt]
      [--serve-port N [--serve-host 127.0.0.1] [--serve-name NAME] [--serve-keep 4]]
  torchrun --nproc_per_node G worker.py ...     data-parallel: G ranks, one per GPU

On start it writes {"ready": true, "backend": ..., "model": ..., "load_s": ...,
"init": DIR, "optimizer_restored": bool, "world": G, "serve_port": N}.
Requests (one object a line; "id" is echoed back):

  {"id": 1, "op": "train", "mode": "sft|dpo|grpo", "data": "BATCH.jsonl", "out": "DIR",
   "recipe": {"lr": ..., "steps": ..., "beta": ..., "kl_coef": ..., "max_len": ...}, "evaluate": true,
   "serve_as": "NAME"}
      trains on the batch and saves the adapter and optimiser state to out;
      with serve_as (and --serve-port) the new weights are served under
      that name from then on; answers {"id": 1, "ok": true, "metrics": {...}, "save_s": ...}
  {"id": 2, "op": "score", "data": "VERIFIER.jsonl", "out": "SCORES.jsonl", "max_len": N}
      scores each record (a rendered trajectory, trainer build's verifier/
      layout) with the current model as a trajectory verifier: P(YES) over
      YES/NO; writes {"index", "episode_id", "score"} lines to out and
      answers {"ok": true, "scored": n, "unscored": m}
  {"id": 3, "op": "ping"}      answers {"ok": true, "backend": ..., "steps_done": n}
  {"id": 4, "op": "shutdown"}  answers {"ok": true} and exits 0

With --serve-port the worker also serves the model it trains over the
OpenAI chat wire (serving.py): /v1/chat/completions with token ids and
logprobs, /v1/load_lora_adapter, /v1/models; the initial weights are
served as --serve-name. Port 0 picks a free port (in the ready line).

Data-parallel (torchrun, WORLD_SIZE > 1): rank 0 reads the requests and
broadcasts each to the other ranks; every rank trains on its shard of the
batch (records rank, rank + G, ...), the gradients are summed over the
ranks, so all take the same step (train_step.py, "data parallel"); rank 0
answers, serves and saves to out, rank r > 0 saves to out.rank<r>. Scoring
runs on rank 0 alone.

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

import serving  # noqa: E402
import train_step  # noqa: E402

RECIPE_KEYS = ("lr", "beta", "kl_coef", "clip_eps", "steps", "agg", "max_len", "micro_batch")


class BadRequest(Exception):
    pass


class Worker:
    """The requests' handlers over one Trainer; policy is the served model
    (None without --serve-port)."""

    def __init__(self, tr, policy=None, rank=0, world=1):
        self.tr, self.policy, self.rank, self.world = tr, policy, rank, world
        self.steps_done = 0

    def live(self):
        """The model with its trained weights, exclusive of serving."""
        if self.policy is None:
            return _Nothing()
        return self.policy.live()


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def requests(inp, rank, world):
    """The request lines: rank 0 reads them and, under data parallelism,
    broadcasts each to the other ranks (None ends them all)."""
    if world == 1:
        yield from inp
        return
    import torch.distributed as dist
    lines = iter(inp) if rank == 0 else None
    while True:
        box = [next(lines, None) if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        if box[0] is None:
            return
        yield box[0]


def serve(w, inp, out):
    def reply(obj):
        if w.rank == 0:
            out.write(json.dumps(obj) + "\n")
            out.flush()

    for line in requests(inp, w.rank, w.world):
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
                reply({"id": rid, "ok": True, "backend": w.tr.be.name, "steps_done": w.steps_done, "world": w.world})
            elif op == "shutdown":
                reply({"id": rid, "ok": True})
                return 0
            elif op == "score":
                if w.rank == 0:
                    reply(dict(score(w, req), id=rid, ok=True))
            elif op == "train":
                m = train(w, req)
                w.steps_done += m["metrics"].get("steps", 0)
                reply(dict(m, id=rid, ok=True))
            else:
                raise BadRequest("unknown op %r (want train, score, ping or shutdown)" % op)
        except BadRequest as e:
            reply({"id": rid, "ok": False, "error": str(e)})
        except (OSError, ValueError, KeyError, TypeError, FloatingPointError) as e:
            print(traceback.format_exc(), file=sys.stderr)
            reply({"id": rid, "ok": False, "error": "%s: %s" % (type(e).__name__, e)})
    return 0


def train(w, req):
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
    serve_as = req.get("serve_as")
    if serve_as is not None and not (isinstance(serve_as, str) and serve_as):
        raise BadRequest("serve_as must be a name")
    recs = train_step.read_jsonl(data)
    need = {"sft": ("messages", "loss_mask"), "dpo": ("prompt", "chosen", "rejected"),
            "grpo": ("prompt", "completion", "completion_mask", "advantage")}[mode]
    for i, r in enumerate(recs):
        missing = [k for k in need if k not in r]
        if missing:
            raise BadRequest("%s record %d lacks %s" % (mode, i + 1, ", ".join(missing)))
    if w.world > 1:
        recs = recs[w.rank::w.world]
        if w.rank > 0:
            out += ".rank%d" % w.rank
    with w.live():
        t0 = time.time()
        metrics = w.tr.step(mode, recs, {k: recipe.get(k) for k in RECIPE_KEYS}, evaluate=req.get("evaluate", True))
        t1 = time.time()
        w.tr.save(out)
        save_s = time.time() - t1
        if w.policy is not None:
            w.policy.saved(out)
            if serve_as:
                w.policy.publish(serve_as)
    metrics.update(out=out, rank=w.rank, world=w.world)
    return {"metrics": metrics, "train_s": t1 - t0, "save_s": save_s}


def score(w, req):
    data, out = req.get("data"), req.get("out")
    if not data or not out:
        raise BadRequest("score needs data and out")
    recs = train_step.read_jsonl(data)
    for i, r in enumerate(recs):
        if not isinstance(r.get("messages"), list) or not any(m.get("role") == "user" for m in r["messages"]):
            raise BadRequest("score record %d has no user message" % (i + 1))
    t0 = time.time()
    with w.live():
        scores = w.tr.score(recs, req.get("max_len") or train_step.DEFAULT_MAX_LEN)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".tmp", "w") as f:
        for i, (r, sc) in enumerate(zip(recs, scores)):
            f.write(json.dumps({"index": i, "episode_id": r.get("episode_id", ""), "run_id": r.get("run_id", ""),
                                "score": sc}) + "\n")
    os.replace(out + ".tmp", out)
    return {"scored": sum(s is not None for s in scores), "unscored": sum(s is None for s in scores),
            "score_s": time.time() - t0}


def die_with_parent():
    """A torchrun rank dies with its launcher (Linux; PR_SET_PDEATHSIG):
    the trainer kills the launcher, and ranks blocked in a collective would
    otherwise live on."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    train_step.add_common(p)
    p.add_argument("--serve-port", type=int, default=-1,
                   help="serve the trained model over the OpenAI chat wire on this port (0: a free one; default off)")
    p.add_argument("--serve-host", default="127.0.0.1")
    p.add_argument("--serve-name", default="", help="the name the initial weights are served as (default --model)")
    p.add_argument("--serve-keep", type=int, default=4, help="served snapshots kept (the oldest go first)")
    args = p.parse_args(argv)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        die_with_parent()
    rank, world = train_step.init_distributed()
    random.seed(args.seed)
    torch.manual_seed(args.seed)  # the same initial model on every rank
    t0 = time.time()
    tr = train_step.Trainer(args)
    restored = tr.load_optimizer(args.init)
    policy, port = None, None
    if args.serve_port >= 0 and rank == 0:
        policy = serving.Policy(tr, args.serve_name or args.model or "tiny", args.serve_keep)
        port = serving.start(policy, args.serve_host, args.serve_port)
    if world > 1:
        import torch.distributed as dist
        dist.barrier()
    if rank == 0:
        sys.stdout.write(json.dumps({"ready": True, "backend": tr.be.name, "model": args.model, "init": args.init,
                                     "optimizer_restored": restored, "load_s": time.time() - t0, "world": world,
                                     "serve_port": port, "serve_name": policy.names()[0] if policy else None}) + "\n")
        sys.stdout.flush()
    rc = serve(Worker(tr, policy, rank, world), sys.stdin if rank == 0 else None, sys.stdout)
    if world > 1:
        import torch.distributed as dist
        dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
