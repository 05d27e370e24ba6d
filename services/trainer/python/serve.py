#!/usr/bin/python3
"""Serves the policy being trained over the OpenAI chat wire, for machines
without vLLM (CI with the tiny model, a GPU machine without vLLM): the
online loop then samples from the adapter it trains. vLLM stays the
production server; this one speaks the part of its API the loop and the
llm-worker use.

  python3 serve.py --backend hf --model MODEL [--port 8000] [--host 127.0.0.1]

  GET  /v1/models                  the base model and the loaded adapters
  POST /v1/chat/completions        messages, model (base or adapter name), temperature, top_p, max_tokens,
                                   seed, logprobs; answers with the message, finish_reason, the completion's
                                   token_ids and per-token logprobs, prompt_token_ids and usage (vLLM's fields)
  POST /v1/load_lora_adapter       {"lora_name", "lora_path"}: loads an adapter (or a tiny checkpoint) by name

Generation is transformers' generate (hf: sampling with the request's
temperature and top_p, logprobs from compute_transition_scores) or a
sampling loop over the tiny model. One request at a time (a lock around
the model). The port is printed on stdout as {"ready": true, "port": N}
(use --port 0 for a free one).
"""

import argparse
import copy
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import train_step  # noqa: E402


class Policy:
    def __init__(self, args):
        self.args = args
        self.be = train_step.make_backend(args)
        self.base = args.model or "tiny"
        self.adapters = {}  # name -> path (hf) or a TinyLM (tiny)
        self.lock = threading.Lock()
        self.be.model.eval()

    def load(self, name, path):
        if self.be.name == "hf":
            if name not in self.adapters:
                self.be.model.load_adapter(path, adapter_name=name)
        else:
            m = copy.deepcopy(self.be.model)
            m.load_state_dict(torch.load(os.path.join(path, "model.pt"), map_location="cpu"))
            m.eval()
            self.adapters[name] = m
            return
        self.adapters[name] = path

    def prompt_ids(self, messages):
        if self.be.name == "hf":
            out = self.be.tok.apply_chat_template(messages, tokenize=True, return_dict=False, add_generation_prompt=True)
            if hasattr(out, "keys"):
                out = out["input_ids"]
            return list(out)
        ids, _ = self.be.encode(messages, [0] * len(messages))
        return ids + list(b"<assistant>\n")

    def complete(self, req):
        name = req.get("model") or self.base
        if name != self.base and name not in self.adapters:
            raise KeyError("model %r is not loaded (base %r, adapters %s)" % (name, self.base, sorted(self.adapters)))
        temp = req.get("temperature")
        temp = 1.0 if temp is None else float(temp)
        top_p = float(req.get("top_p") or 1.0)
        max_new = int(req.get("max_completion_tokens") or req.get("max_tokens") or 256)
        if req.get("seed") is not None:
            torch.manual_seed(int(req["seed"]))
        ids = self.prompt_ids(req["messages"])
        with self.lock, torch.no_grad():
            if self.be.name == "hf":
                toks, lps, finish = self.generate_hf(name, ids, temp, top_p, max_new)
                text = self.be.tok.decode(toks, skip_special_tokens=True)
                pieces = [self.be.tok.decode([t]) for t in toks]
            else:
                toks, lps, finish = self.generate_tiny(name, ids, temp, max_new)
                text = bytes(toks).decode("utf-8", errors="replace")
                pieces = [bytes([t]).decode("latin-1") for t in toks]
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                  "token_ids": toks}
        if req.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": p, "logprob": lp} for p, lp in zip(pieces, lps)]}
        return {"id": "medgym-%d" % time.time_ns(), "object": "chat.completion", "model": name, "choices": [choice],
                "prompt_token_ids": ids, "usage": {"prompt_tokens": len(ids), "completion_tokens": len(toks),
                                                   "total_tokens": len(ids) + len(toks)}}

    def generate_hf(self, name, ids, temp, top_p, max_new):
        m = self.be.model
        if name == self.base:
            ctx = m.disable_adapter()
        else:
            m.set_adapter(name)
            ctx = torch.no_grad()
        x = torch.tensor([ids], device=self.be.dev)
        with ctx:
            out = m.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=max_new,
                             do_sample=temp > 0, temperature=temp if temp > 0 else None, top_p=top_p,
                             return_dict_in_generate=True, output_scores=True, pad_token_id=self.be.pad)
            scores = m.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        toks = out.sequences[0, len(ids):].tolist()
        lps = scores[0].float().tolist()
        eos = self.be.tok.eos_token_id
        finish = "stop" if toks and toks[-1] == eos else "length"
        if toks and toks[-1] == eos:
            toks, lps = toks[:-1], lps[:-1]
        return toks, lps, finish

    def generate_tiny(self, name, ids, temp, max_new):
        m = self.adapters.get(name, self.be.model)
        seq, toks, lps = list(ids), [], []
        for _ in range(max_new):
            logits = m(torch.tensor([seq]))[0, -1, :256].float()
            logp = torch.log_softmax(logits / max(temp, 1e-6), -1) if temp > 0 else torch.log_softmax(logits, -1)
            t = int(torch.multinomial(logp.exp(), 1)) if temp > 0 else int(logp.argmax())
            if t == ord("\n") and toks and toks[-1] == ord("\n"):
                return toks[:-1], lps[:-1], "stop"
            toks.append(t)
            lps.append(float(logp[t]))
            seq.append(t)
        return toks, lps, "length"


def handler(policy):
    class H(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            print(fmt % a, file=sys.stderr)

        def send(self, code, obj):
            b = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def error(self, code, msg):
            self.send(code, {"error": {"message": msg, "type": "BadRequestError" if code == 400 else "NotFoundError",
                                       "code": code}})

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                names = [policy.base] + sorted(policy.adapters)
                return self.send(200, {"object": "list", "data": [{"id": n, "object": "model"} for n in names]})
            self.error(404, "no route %s" % self.path)

        def do_POST(self):
            try:
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
            except ValueError as e:
                return self.error(400, "malformed request: %s" % e)
            path = self.path.rstrip("/")
            try:
                if path == "/v1/chat/completions":
                    if req.get("stream"):
                        return self.error(400, "streaming is not supported")
                    if not isinstance(req.get("messages"), list) or not req["messages"]:
                        return self.error(400, "messages is required")
                    return self.send(200, policy.complete(req))
                if path == "/v1/load_lora_adapter":
                    name, p = req.get("lora_name"), req.get("lora_path")
                    if not name or not p:
                        return self.error(400, "lora_name and lora_path are required")
                    if name in policy.adapters:
                        return self.error(400, "The lora adapter '%s' has already been loaded." % name)
                    with policy.lock:
                        policy.load(name, p)
                    return self.send(200, {"status": "ok", "lora_name": name})
            except KeyError as e:
                return self.error(404, str(e))
            except (OSError, ValueError, RuntimeError) as e:
                return self.error(400, "%s: %s" % (type(e).__name__, e))
            self.error(404, "no route %s" % self.path)

    return H


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    train_step.add_common(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    policy = Policy(args)
    srv = ThreadingHTTPServer((args.host, args.port), handler(policy))
    print(json.dumps({"ready": True, "port": srv.server_address[1], "backend": policy.be.name, "model": policy.base}),
          flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
