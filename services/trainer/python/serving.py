"""The resident worker's policy server: the model the worker trains,
served over the OpenAI chat wire from the same process (worker.py
--serve-port), so an online loop without vLLM samples from the policy it
trains (services/trainer/README.md, "Serving from the resident worker").

  GET  /health                     200
  GET  /v1/models                  the served names
  POST /v1/chat/completions        messages, model (a served name), temperature, top_p, max_tokens /
                                   max_completion_tokens, seed, logprobs; answers with the message,
                                   finish_reason, the completion's token_ids (ending with the stop token, as
                                   vLLM's return_token_ids) and per-token logprobs (vLLM's raw logprobs: the
                                   log-softmax of the logits before temperature and top-p), prompt_token_ids
                                   and usage; logprobs tokens are "token_id:<id>" with return_tokens_as_token_ids
  POST /v1/load_lora_adapter       {"lora_name", "lora_path"}: serves an adapter (or a tiny checkpoint) by name

Names: the worker's initial weights are served as --serve-name (the
online loop passes the base model's name, or after a restart the current
adapter's); a train request with "serve_as" publishes the weights it has
just trained under that name, and /v1/load_lora_adapter publishes a saved
adapter (the last one trained: the live weights, no disk read). Every
name is a snapshot of the trainable weights (the LoRA matrices; the whole
tiny model), kept on the model's device; serving one copies it into the
model, and training first restores the live weights. One lock serialises
generation, training and scoring: a request that arrives during a step
waits for it, then is served from the snapshot it names, so samples of
version v are from version v even after v+1 exists. The oldest snapshots
beyond --serve-keep are dropped (a request naming one gets 404).
"""

import json
import os
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

LIVE = object()  # the trained weights, as opposed to a published snapshot


class AlreadyLoaded(Exception):
    pass


class Policy:
    """The snapshots of a Trainer's weights, and generation from them."""

    def __init__(self, tr, name, keep=4):
        self.tr, self.be = tr, tr.be
        self.lock = threading.RLock()
        self.snaps = OrderedDict()  # name -> {param name: tensor}
        self.keep = max(1, keep)
        self.current = LIVE  # what the parameters hold: LIVE or a name
        self.stash = None    # the live weights while a snapshot is in the parameters
        self.last_out = None
        self.snaps[name] = self._copy()

    def _params(self):
        return {n: p for n, p in self.be.model.named_parameters() if p.requires_grad}

    def _copy(self):
        return {n: p.detach().clone() for n, p in self._params().items()}

    def _put(self, state):
        with torch.no_grad():
            for n, p in self._params().items():
                p.copy_(state[n])

    def _use(self, key):
        """Puts the weights of key (a name or LIVE) into the model; the
        caller holds the lock."""
        if self.current is key or self.current == key:
            return
        if self.current is LIVE:
            self.stash = self._copy()
        self._put(self.stash if key is LIVE else self.snaps[key])
        self.current = key
        if key is LIVE:
            self.stash = None

    def live(self):
        """The lock, with the trained weights restored in the model: hold it
        for training, scoring and saving."""
        policy = self

        class Ctx:
            def __enter__(self):
                policy.lock.acquire()
                policy._use(LIVE)

            def __exit__(self, *exc):
                policy.lock.release()
        return Ctx()

    def _add(self, name, state):
        self.snaps[name] = state
        while len(self.snaps) > self.keep:
            self.snaps.popitem(last=False)

    def saved(self, out):
        """Notes that the live weights were saved to out (a later load of
        out takes them without reading the disk)."""
        self.last_out = os.path.realpath(out)

    def publish(self, name):
        """Serves the live weights as name."""
        with self.live():
            self._add(name, self._copy())

    def load(self, name, path):
        """Serves the adapter (hf) or checkpoint (tiny) at path as name."""
        with self.live():
            if name in self.snaps:
                raise AlreadyLoaded("The lora adapter '%s' has already been loaded." % name)
            if self.last_out and os.path.realpath(path) == self.last_out:
                return self._add(name, self._copy())
            live = self._copy()
            try:
                if self.be.name == "hf":
                    from peft import set_peft_model_state_dict
                    from peft.utils import load_peft_weights
                    res = set_peft_model_state_dict(self.be.model, load_peft_weights(path, device=str(self.be.dev)))
                    if getattr(res, "unexpected_keys", None):
                        raise ValueError("adapter %s does not fit the model: unexpected %s" % (path, res.unexpected_keys[:3]))
                    snap = self._copy()
                else:
                    state = torch.load(os.path.join(path, "model.pt"), map_location="cpu")
                    snap = {n: state[n].to(p.device) for n, p in self._params().items()}
            finally:
                self._put(live)
            self._add(name, snap)

    def names(self):
        """The served names, oldest first (read without the lock, which a
        training step holds for long: retried if a step publishes meanwhile)."""
        while True:
            try:
                return list(self.snaps)
            except RuntimeError:
                continue

    def prompt_ids(self, messages):
        if self.be.name == "hf":
            out = self.be.tok.apply_chat_template(messages, tokenize=True, return_dict=False, add_generation_prompt=True)
            if hasattr(out, "keys"):
                out = out["input_ids"]
            return list(out)
        ids, _ = self.be.encode(messages, [0] * len(messages))
        return ids + list(b"<assistant>\n")

    def complete(self, req):
        name = req.get("model") or self.names()[-1]
        temp = req.get("temperature")
        temp = 1.0 if temp is None else float(temp)
        top_p = float(req.get("top_p") or 1.0)
        max_new = int(req.get("max_completion_tokens") or req.get("max_tokens") or 256)
        ids = self.prompt_ids(req["messages"])
        with self.lock:
            if name not in self.snaps:
                raise KeyError("model %r is not served (served: %s)" % (name, self.names()))
            self._use(name)
            if req.get("seed") is not None:
                torch.manual_seed(int(req["seed"]))
            model = self.be.model
            was_training = model.training
            model.eval()
            try:
                with torch.no_grad():
                    if self.be.name == "hf":
                        toks, lps, finish = self.generate_hf(ids, temp, top_p, max_new)
                    else:
                        toks, lps, finish = self.generate_tiny(ids, temp, max_new)
            finally:
                model.train(was_training)
        if self.be.name == "hf":
            text = self.be.tok.decode(toks, skip_special_tokens=True)
            pieces = [self.be.tok.decode([t]) for t in toks]
        else:
            text = bytes(t for t in toks if t < 256).decode("utf-8", errors="replace")
            pieces = [bytes([t]).decode("latin-1") if t < 256 else "" for t in toks]
        if req.get("return_tokens_as_token_ids"):
            pieces = ["token_id:%d" % t for t in toks]
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                  "token_ids": toks}
        if req.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": p, "logprob": lp, "top_logprobs": []} for p, lp in zip(pieces, lps)]}
        return {"id": "medgym-%d" % time.time_ns(), "object": "chat.completion", "created": int(time.time()),
                "model": name, "choices": [choice], "prompt_token_ids": ids,
                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(toks), "total_tokens": len(ids) + len(toks)}}

    def generate_hf(self, ids, temp, top_p, max_new):
        m, eos = self.be.model, self.be.tok.eos_token_id
        x = torch.tensor([ids], device=self.be.dev)
        kw = dict(do_sample=True, temperature=temp, top_p=top_p) if temp > 0 else dict(do_sample=False)
        out = m.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, return_dict_in_generate=True,
                         output_logits=True, pad_token_id=self.be.pad, eos_token_id=eos, **kw)
        toks = out.sequences[0, len(ids):].tolist()
        lps = [float(torch.log_softmax(lg[0].float(), -1)[t]) for lg, t in zip(out.logits, toks)]
        if eos in toks:  # generation stops at the stop token; it stays in the ids, as vLLM returns it
            cut = toks.index(eos) + 1
            return toks[:cut], lps[:cut], "stop"
        return toks, lps, "length"

    def generate_tiny(self, ids, temp, max_new):
        m = self.be.model
        seq, toks, lps = list(ids), [], []
        for _ in range(max_new):
            logits = m(torch.tensor([seq]))[0, -1, :256].float()
            raw = torch.log_softmax(logits, -1)
            if temp > 0:
                t = int(torch.multinomial(torch.softmax(logits / temp, -1), 1))
            else:
                t = int(raw.argmax())
            toks.append(t)
            lps.append(float(raw[t]))
            seq.append(t)
            if t == ord("\n") and len(toks) > 1 and toks[-2] == ord("\n"):
                return toks, lps, "stop"
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
            path = self.path.rstrip("/")
            if path == "/health":
                return self.send(200, {})
            if path == "/v1/models":
                return self.send(200, {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "medgym"}
                                                                   for n in policy.names()]})
            self.error(404, "no route %s" % self.path)

        def do_POST(self):
            try:
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
                if not isinstance(req, dict):
                    raise ValueError("a request is a JSON object")
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
                    policy.load(name, p)
                    return self.send(200, {"status": "ok", "lora_name": name})
            except AlreadyLoaded as e:
                return self.error(400, str(e))
            except KeyError as e:
                return self.error(404, str(e.args[0]) if e.args else str(e))
            except (OSError, ValueError, RuntimeError, TypeError) as e:
                print("serving: %s: %s" % (type(e).__name__, e), file=sys.stderr)
                return self.error(400, "%s: %s" % (type(e).__name__, e))
            self.error(404, "no route %s" % self.path)

    return H


def start(policy, host, port):
    """Serves policy on host:port (0: a free port) in a daemon thread;
    returns the port."""
    srv = ThreadingHTTPServer((host, port), handler(policy))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]
