#!/usr/bin/python3
"""Checks train_step.py's hf backend (transformers + peft, the GPU path)
end to end without downloading anything: it builds a tiny randomly
initialised Llama and a byte-level BPE tokenizer trained on the toy batches
in ../testdata, with a ChatML chat template, then

  1. encodes a conversation and checks the loss mask: the tokens that carry
     loss decode to the assistant turns, the others to the rest, and the
     spans concatenate to the chat template of the whole conversation;
  2. runs SFT through train_step.py (one process per step), then GRPO and
     DPO through one resident worker (worker.py: the model loaded once,
     the optimiser kept), and checks what the CPU test checks for the tiny
     backend (SFT loss falls, DPO margin rises, GRPO raises positive- and
     lowers negative-advantage log-probs), that a malformed request gets an
     error and the worker goes on, and that each output is a peft adapter
     directory (adapter_config.json naming the base model,
     adapter_model.safetensors) as vLLM's /v1/load_lora_adapter loads it;
  3. starts a new worker from the DPO adapter and its optimiser state
     (--init, as after a crash) and checks that the step starts where the
     last one ended.

Runs on a GPU when torch sees one, else on the CPU. Needs transformers
(>= 4.56) and peft; exits 2 when they are missing, 1 when a check fails.
Usage: python3 hf_check.py [--work DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "..", "testdata")
sys.path.insert(0, HERE)

from tinyllama import build_tiny, read_jsonl  # noqa: E402


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def check_mask(model_dir):
    import train_step

    args = argparse.Namespace(model=model_dir, init="", grad_ckpt=False, lora_r=8, max_len=4096)
    be = train_step.HFBackend(args)
    rec = read_jsonl(os.path.join(TESTDATA, "toy_sft.jsonl"))[0]
    msgs = rec["messages"] + [{"role": "tool", "content": "22.857"},
                              {"role": "assistant", "content": '{"action": "answer", "params": {"answer": "22.9"}}'}]
    mask = [1 if m["role"] == "assistant" else 0 for m in msgs]
    ids, lm = be.encode(msgs, mask)
    whole = train_step.template_ids(be.tok, msgs)
    check(ids == whole, "message spans do not concatenate to the whole conversation's template")
    trained = be.tok.decode([t for t, k in zip(ids, lm) if k])
    rest = be.tok.decode([t for t, k in zip(ids, lm) if not k])
    for m, k in zip(msgs, mask):
        check(m["content"] in (trained if k else rest), "%s turn %r is on the wrong side of the mask" % (m["role"], m["content"][:40]))
    return {"tokens": len(ids), "trained_tokens": sum(lm)}


def check_adapter(out, model_dir, mode):
    with open(os.path.join(out, "adapter_config.json")) as f:
        acfg = json.load(f)
    check(acfg.get("peft_type") == "LORA" and acfg.get("base_model_name_or_path") == model_dir and acfg.get("target_modules"),
          "%s adapter_config.json: %s" % (mode, acfg))
    check(os.path.exists(os.path.join(out, "adapter_model.safetensors")), "%s: no adapter_model.safetensors" % mode)


PROMPT = read_jsonl(os.path.join(TESTDATA, "toy_grpo.jsonl"))[0]["prompt"]  # where GRPO moves the policy most
STEP = ["--steps", "15", "--lr", "5e-3", "--micro-batch", "2"]
RECIPE = {"steps": 15, "lr": 5e-3, "micro_batch": 2}


def run_step(model_dir, work, mode):
    """One train_step.py process (the per-iteration path)."""
    out = os.path.join(work, mode)
    metrics = out + ".metrics.json"
    cmd = [sys.executable, os.path.join(HERE, "train_step.py"), "--mode", mode, "--backend", "hf", "--model", model_dir,
           "--data", os.path.join(TESTDATA, "toy_%s.jsonl" % mode), "--out", out, "--metrics", metrics, "--lora-r", "8"] + STEP
    res = subprocess.run(cmd, capture_output=True, text=True)
    check(res.returncode == 0, "train_step %s failed:\n%s%s" % (mode, res.stdout, res.stderr))
    with open(metrics) as f:
        m = json.load(f)
    check(m["backend"] == "hf" and m["steps"] == 15, "%s metrics: %s" % (mode, m))
    check_adapter(out, model_dir, mode)
    return out, m


class Worker:
    """A resident worker.py process."""

    def __init__(self, model_dir, init="", serve=False):
        cmd = [sys.executable, os.path.join(HERE, "worker.py"), "--backend", "hf", "--model", model_dir, "--lora-r", "8"]
        if serve:
            cmd += ["--serve-port", "0", "--serve-name", "base"]
        if init:
            cmd.append("--init=" + init)
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = json.loads(self.p.stdout.readline() or "{}")
        check(self.ready.get("ready") and self.ready.get("backend") == "hf", "worker start: %s" % self.ready)
        self.model_dir, self.n = model_dir, 0

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline() or "{}")

    def train(self, work, mode, tag="", serve_as=None):
        self.n += 1
        out = os.path.join(work, mode + tag)
        ans = self.send(json.dumps({"id": self.n, "op": "train", "mode": mode, "out": out, "recipe": RECIPE,
                                    "data": os.path.join(TESTDATA, "toy_%s.jsonl" % mode), "serve_as": serve_as}))
        check(ans.get("ok") and ans.get("id") == self.n, "worker %s: %s" % (mode, ans))
        m = ans["metrics"]
        check(m["backend"] == "hf" and m["steps"] == 15, "%s metrics: %s" % (mode, m))
        check_adapter(out, self.model_dir, mode)
        check(os.path.exists(os.path.join(out, "optimizer.pt")), "%s: no optimizer.pt" % mode)
        return out, m

    def post(self, path, body):
        """POSTs to the worker's policy server; returns (status, JSON)."""
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.ready["serve_port"], path),
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def chat(self, model):
        """A greedy completion of a fixed prompt: (token ids, logprobs)."""
        code, ans = self.post("/v1/chat/completions", {"model": model, "messages": PROMPT, "temperature": 0,
                                                        "max_tokens": 12, "logprobs": True, "return_token_ids": True})
        check(code == 200, "chat %s: %s %s" % (model, code, ans))
        ch = ans["choices"][0]
        lps = [c["logprob"] for c in ch["logprobs"]["content"]]
        check(ch["token_ids"] and len(lps) == len(ch["token_ids"]) and ans["prompt_token_ids"],
              "chat %s: token ids and logprobs: %s" % (model, ans))
        return ans["prompt_token_ids"], ch["token_ids"], lps

    def close(self):
        ans = self.send(json.dumps({"op": "shutdown"}))
        check(ans.get("ok") and self.p.wait(timeout=60) == 0, "worker shutdown: %s" % ans)


def token_logps(model_dir, init, prompt_ids, toks):
    """Log-probabilities of toks after prompt_ids under the base model with
    the adapter at init (none: the base), recomputed by the training code."""
    import torch
    import train_step
    be = train_step.HFBackend(argparse.Namespace(model=model_dir, init=init, grad_ckpt=False, lora_r=8))
    x = torch.tensor([prompt_ids + toks], device=be.dev)
    with torch.no_grad():
        lp = be.logps(be.model, x, torch.ones_like(x))[0].float().cpu()
    return lp[len(prompt_ids) - 1:].tolist()


def check_serving(w, model_dir, grpo_out, base0):
    """The worker serves the weights it trained: after the GRPO step the
    fixed prompt's logprobs under "v1" are those the saved adapter gives
    (recomputed by the training code) and differ from the base's, while
    "base" still serves the weights from before the step."""
    # fp32 on the CPU: generation and the recomputation agree to ~1e-6; bf16
    # on a GPU to a few 1e-2 (the step moves them by ~1e-1).
    tol = 5e-2 if _cuda() else 1e-4
    prompt, toks1, lps1 = w.chat("v1")
    check(prompt == base0[0], "the prompt's token ids changed")
    check(w.chat("base") == base0, "the base's snapshot changed under training")
    want1 = token_logps(model_dir, grpo_out, prompt, toks1)
    err = max(abs(a - b) for a, b in zip(lps1, want1))
    check(err < tol, "v1's served logprobs %s, the adapter gives %s" % (lps1, want1))
    wantb = token_logps(model_dir, "", prompt, toks1)
    moved = max(abs(a - b) for a, b in zip(lps1, wantb))
    check(moved > max(3 * err, 1e-2), "v1 serves like the base: logprobs differ by %g (from v1's: %g)" % (moved, err))
    return {"logprob_change": moved, "logprob_error": err, "tokens": len(toks1)}


def _cuda():
    import torch
    return torch.cuda.is_available()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", default="", help="work directory (default: a temporary one)")
    a = p.parse_args()
    try:
        import peft
        import torch
        import transformers
    except ImportError as e:
        print("hf_check: %s (needs torch, transformers and peft)" % e, file=sys.stderr)
        return 2
    work = a.work or tempfile.mkdtemp(prefix="medgym-hf-check-")
    model_dir = os.path.join(work, "tiny-llama")
    summary = {"transformers": transformers.__version__, "peft": peft.__version__, "torch": torch.__version__,
               "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    try:
        build_tiny(model_dir)
        summary["mask"] = check_mask(model_dir)
        _, m = run_step(model_dir, work, "sft")
        check(m["after"]["sft_loss"] < m["before"]["sft_loss"] - 0.5, "SFT loss did not fall: %s" % m)
        summary["sft_loss"] = [m["before"]["sft_loss"], m["after"]["sft_loss"]]
        w = Worker(model_dir, serve=True)
        base0 = w.chat("base")
        grpo_out, m = w.train(work, "grpo", serve_as="v1")
        b, e = m["before"], m["after"]
        check(e["pos_logp"] > b["pos_logp"] and e["neg_logp"] < b["neg_logp"] and e["kl"] > 0, "GRPO: %s" % m)
        summary["grpo_pos_logp"] = [b["pos_logp"], e["pos_logp"]]
        summary["serving"] = check_serving(w, model_dir, grpo_out, base0)
        ans = w.send('{"op": "train", "mode": ')
        check(ans.get("ok") is False and "malformed" in ans.get("error", ""), "malformed request: %s" % ans)
        out, m = w.train(work, "dpo")  # the same worker, model and adapter: no new load
        check(m["after"]["dpo_margin"] > m["before"]["dpo_margin"] + 0.1, "DPO margin did not rise: %s" % m)
        # The GRPO adapter from disk (not the live weights any more) serves as the snapshot did.
        code, ans = w.post("/v1/load_lora_adapter", {"lora_name": "grpo-disk", "lora_path": grpo_out})
        check(code == 200, "load_lora_adapter: %s %s" % (code, ans))
        code, ans = w.post("/v1/load_lora_adapter", {"lora_name": "grpo-disk", "lora_path": grpo_out})
        check(code == 400 and "already been loaded" in ans["error"]["message"], "a second load: %s %s" % (code, ans))
        check(w.chat("grpo-disk") == w.chat("v1"), "the GRPO adapter loaded from disk serves unlike its snapshot")
        code, ans = w.post("/v1/chat/completions", {"model": "nope", "messages": PROMPT})
        check(code == 404, "an unknown model: %s %s" % (code, ans))
        summary["dpo_margin"] = [m["before"]["dpo_margin"], m["after"]["dpo_margin"]]
        last = m["after"]["dpo_margin"]
        w.close()
        w2 = Worker(model_dir, init=out)
        check(w2.ready.get("optimizer_restored"), "the restarted worker did not restore the optimiser: %s" % w2.ready)
        _, m2 = w2.train(work, "dpo", "-resumed")
        check(abs(m2["before"]["dpo_margin"] - last) < 5e-2,
              "resumed DPO starts at margin %s, the last step ended at %s" % (m2["before"]["dpo_margin"], last))
        summary["resumed_dpo_margin"] = m2["before"]["dpo_margin"]
        w2.close()
    except AssertionError as err:
        summary["failed"] = str(err)
        print(json.dumps(summary, indent=1))
        return 1
    summary["ok"] = True
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
