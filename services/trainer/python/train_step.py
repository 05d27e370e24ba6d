#!/usr/bin/python3
"""One medgym training step: SFT, DPO or GRPO on a JSONL batch written by
`bin/trainer` (services/trainer/train).

Backends
  hf    a Hugging Face causal LM (--model) with a LoRA adapter through peft;
        needs `transformers` and `peft` (the GPU path). The adapter directory
        (adapter_config.json + weights) is what vLLM's /v1/load_lora_adapter
        loads.
  tiny  a small byte-level causal convolutional language model defined
        here, trained in full on the CPU. It exists so CI can check the
        losses; its checkpoint (model.pt) is not servable.
  auto  hf when --model is given and transformers/peft import, else tiny.

Losses (services/trainer/README.md, formats.md §7)
  sft   mean negative log-likelihood of the tokens of messages whose
        loss_mask is 1 (assistant turns).
  dpo   -log σ(β[(logπθ(y+|x) − logπref(y+|x)) − (logπθ(y−|x) − logπref(y−|x))]),
        log-probabilities summed over completion tokens only.
  grpo  clipped surrogate min(ρÂ, clip(ρ, 1−ε, 1+ε)Â) − β·k3 per completion
        token, ρ = exp(logπθ − logπold), k3 = e^Δ − Δ − 1 with Δ = logπref − logπθ
        (Δ clamped to ±20, k3 to ≤10 as verl does); aggregated DAPO-style
        (token mean over the batch, --agg token) or per sequence (--agg seq),
        each sample scaled by its weight (staleness re-weighting). π_old is
        the policy at the start of the step (or the sampler's recorded
        logprobs with the hf backend when they cover every completion token);
        π_ref is the initial policy of the step (hf: the base model, adapter
        disabled).

Outputs: --out DIR (the adapter or checkpoint) and --metrics FILE (JSON):
loss per step and, evaluated on the batch before and after training, the
SFT loss, the DPO implicit-reward margin, and the mean per-token
log-probability of positive- and negative-advantage GRPO completions.
"""

import argparse
import copy
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------- backends


class TinyLM(nn.Module):
    """Byte-level causal language model: 256 bytes + BOS + PAD, a stack of
    dilated causal convolutions (receptive field 255 bytes) with residual
    connections. Convolutions run over the whole sequence at once, so a
    4,000-byte MedCalc conversation costs milliseconds on a CPU, where a
    recurrent network would step through it byte by byte."""

    VOCAB, BOS, PAD = 258, 256, 257

    def __init__(self, dim=64, hidden=128, dilations=(1, 2, 4, 8, 16, 32, 64)):
        super().__init__()
        self.config = {"dim": dim, "hidden": hidden, "dilations": list(dilations)}
        self.emb = nn.Embedding(self.VOCAB, dim)
        self.convs = nn.ModuleList(nn.Conv1d(dim, dim, 3, dilation=d) for d in dilations)
        self.pads = list(dilations)
        self.proj = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, self.VOCAB)

    def forward(self, ids):
        h = self.emb(ids).transpose(1, 2)  # [B, dim, T]
        for conv, d in zip(self.convs, self.pads):
            h = h + torch.tanh(conv(F.pad(h, (2 * d, 0))))  # left padding only: causal
        return self.out(torch.tanh(self.proj(h.transpose(1, 2))))


class TinyBackend:
    name = "tiny"
    dev = "cpu"

    def __init__(self, args):
        self.model = TinyLM()
        if args.init and os.path.exists(os.path.join(args.init, "model.pt")):
            state = torch.load(os.path.join(args.init, "model.pt"), map_location="cpu")
            self.model.load_state_dict(state)
        self.ref = copy.deepcopy(self.model).eval()
        for p in self.ref.parameters():
            p.requires_grad_(False)
        self.pad = TinyLM.PAD

    def encode(self, messages, mask):
        """Render messages as bytes: "<role>\\n" (never trained) then the
        content and a newline (trained when the message's mask is 1)."""
        ids, lm = [TinyLM.BOS], [0]
        for m, k in zip(messages, mask):
            head = ("<%s>\n" % m["role"]).encode()
            body = (m["content"] + "\n").encode()
            ids += list(head) + list(body)
            lm += [0] * len(head) + [int(k)] * len(body)
        return ids, lm

    def logps(self, model, ids, attn):
        return token_logps(model(ids), ids)

    def ref_logps(self, ids, attn):
        with torch.no_grad():
            return token_logps(self.ref(ids), ids)

    def save(self, out):
        os.makedirs(out, exist_ok=True)
        torch.save(self.model.state_dict(), os.path.join(out, "model.pt"))
        with open(os.path.join(out, "checkpoint.json"), "w") as f:
            json.dump({"backend": "tiny", "model": "TinyLM", "config": self.model.config}, f)


class HFBackend:
    """Needs transformers >= 4.56 (the dtype argument) and peft."""

    name = "hf"

    def __init__(self, args):
        from peft import LoraConfig, PeftModel, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if dev == "cuda" else torch.float32
        self.tok = AutoTokenizer.from_pretrained(args.model)
        base = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(dev)
        if args.grad_ckpt:
            base.gradient_checkpointing_enable()
            base.enable_input_require_grads()  # LoRA: the frozen embeddings must still pass gradients
        if args.init and os.path.exists(os.path.join(args.init, "adapter_config.json")):
            self.model = PeftModel.from_pretrained(base, args.init, is_trainable=True)
        else:
            cfg = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
                             target_modules="all-linear", task_type="CAUSAL_LM")
            self.model = get_peft_model(base, cfg)
        self.dev = dev
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id

    def encode(self, messages, mask):
        """Token spans per message by prefix differences of the chat
        template; a message's span carries loss when its mask is 1."""
        ids, lm, prev = [], [], []
        for i, k in enumerate(mask):
            cur = template_ids(self.tok, messages[: i + 1])
            if cur[: len(prev)] != prev:  # template rewrote the prefix: fall back to the tail
                cur = prev + cur[len(prev):]
            span = cur[len(prev):]
            ids += span
            lm += [int(k)] * len(span)
            prev = cur
        return ids, lm

    def logps(self, model, ids, attn):
        return token_logps(model(input_ids=ids, attention_mask=attn).logits, ids)

    def ref_logps(self, ids, attn):
        with torch.no_grad(), self.model.disable_adapter():
            return self.logps(self.model, ids, attn)

    def save(self, out):
        self.model.save_pretrained(out)
        self.tok.save_pretrained(out)


def template_ids(tok, messages):
    """Token ids of the chat template over messages. transformers 5 returns
    a BatchEncoding unless return_dict=False; accept either."""
    out = tok.apply_chat_template(messages, tokenize=True, return_dict=False, add_generation_prompt=False)
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


ELIDED = "[... observation elided: the conversation exceeded the training length ...]"


class Fitter:
    """Fits conversations into max_len tokens without losing the question:
    the system prompt and the task (every message before the first
    assistant turn) and every assistant turn stay; observations between
    them are replaced by a visible marker, oldest first, until the
    conversation fits. A conversation that still does not fit is dropped
    (None) and counted, never cut at the head."""

    def __init__(self, be, max_len):
        self.be, self.max_len = be, max_len
        self.elided = 0        # observations replaced by the marker
        self.elided_records = set()
        self.dropped = 0       # records that could not fit
        self.lengths = []      # token lengths before fitting

    def __call__(self, key, messages, mask):
        ids, lm = self.be.encode(messages, mask)
        self.lengths.append(len(ids))
        if len(ids) <= self.max_len:
            return ids, lm
        first_assistant = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
        msgs = [dict(m) for m in messages]
        for i in range(first_assistant, len(msgs) - 1):
            if mask[i] or msgs[i]["role"] == "assistant" or msgs[i]["content"] == ELIDED:
                continue
            msgs[i]["content"] = ELIDED
            self.elided += 1
            self.elided_records.add(key)
            ids, lm = self.be.encode(msgs, mask)
            if len(ids) <= self.max_len:
                return ids, lm
        self.dropped += 1
        return None

    def stats(self):
        ls = sorted(self.lengths)
        q = (lambda p: ls[min(len(ls) - 1, int(p * len(ls)))]) if ls else (lambda p: 0)
        return {"max_len": self.max_len, "records": len(ls), "elided_observations": self.elided,
                "records_elided": len(self.elided_records), "dropped": self.dropped,
                "tokens_p50": q(0.5), "tokens_p90": q(0.9), "tokens_max": ls[-1] if ls else 0}


def make_backend(args):
    if args.backend in ("hf", "auto") and args.model:
        try:
            import peft  # noqa: F401
            import transformers  # noqa: F401
            return HFBackend(args)
        except ImportError as e:
            if args.backend == "hf":
                sys.exit("train_step: --backend hf needs transformers and peft: %s" % e)
    if args.backend == "hf":
        sys.exit("train_step: --backend hf needs --model")
    return TinyBackend(args)


# ---------------------------------------------------------------- batches


class Batch:
    """Padded sequences on the CPU; chunks of micro_batch rows go to the
    backend's device one at a time, trimmed to their longest row, so memory
    holds one micro-batch's logits, never the whole batch's."""

    def __init__(self, seqs, pad, micro_batch):
        T = max((len(s[0]) for s in seqs), default=1)
        self.ids = torch.full((len(seqs), T), pad, dtype=torch.long)
        self.attn = torch.zeros((len(seqs), T), dtype=torch.long)
        mask = torch.zeros((len(seqs), T), dtype=torch.float32)
        for i, (x, m) in enumerate(seqs):
            self.ids[i, : len(x)] = torch.tensor(x)
            self.attn[i, : len(x)] = 1
            mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
        self.mask = mask[:, 1:]  # aligned with the next-token log-probs
        self.lens = [len(s[0]) for s in seqs]
        self.n = len(seqs)
        self.mb = micro_batch if micro_batch > 0 else self.n

    def chunks(self):
        """(rows, width): rows a slice, width the chunk's longest row."""
        for a in range(0, self.n, self.mb):
            rows = slice(a, min(a + self.mb, self.n))
            yield rows, max(self.lens[rows])

    def inputs(self, rows, width, dev):
        return self.ids[rows, :width].to(dev), self.attn[rows, :width].to(dev)

    def per_token(self, fn, dev):
        """fn(ids, attn) -> [b, width-1] for each chunk, gathered into a
        [B, T-1] CPU tensor (no gradient)."""
        out = torch.zeros_like(self.mask)
        with torch.no_grad():
            for rows, width in self.chunks():
                out[rows, : width - 1] = fn(*self.inputs(rows, width, dev)).float().cpu()
        return out


def token_logps(logits, ids):
    """Log-probability of each next token, [B, T-1]: the gathered logit
    minus the log-sum-exp, without materialising a log-softmax copy."""
    logits = logits[:, :-1].float()
    tgt = ids[:, 1:].unsqueeze(-1)
    return logits.gather(-1, tgt).squeeze(-1) - torch.logsumexp(logits, dim=-1)


# ---------------------------------------------------------------- losses
#
# Each objective splits its loss over micro-batches: part(model, rows,
# width) is that chunk's share, normalised by whole-batch counts, so the
# parts sum to the full-batch loss and their gradients, accumulated, to its
# gradient.


class Objective:
    def tokens(self):
        """Tokens of the sequences one step runs through the model."""
        return sum(sum(b.lens) for b in self.batches())

    def batches(self):
        return [self.batch]

    def loss(self, model):
        with torch.no_grad():
            return sum(self.part(model, rows, width).item() for rows, width in self.chunks())


class SFT(Objective):
    def __init__(self, be, recs, args, fit):
        self.be = be
        seqs = [fit(i, r["messages"], r["loss_mask"]) for i, r in enumerate(recs)]
        self.records = sum(x is not None for x in seqs)
        self.batch = Batch([x for x in seqs if x is not None], be.pad, args.micro_batch)
        self.chunks = self.batch.chunks
        self.ntok = global_sum(self.batch.mask.sum()).clamp(min=1)

    def part(self, model, rows, width):
        b = self.batch
        lp = self.be.logps(model, *b.inputs(rows, width, self.be.dev))
        return -(lp * b.mask[rows, : width - 1].to(lp.device)).sum() / self.ntok.to(lp.device)

    def evaluate(self, model):
        return {"sft_loss": self.loss(model)}


class DPO(Objective):
    def __init__(self, be, recs, args, fit):
        self.be, self.beta = be, args.beta

        def enc(i, r, side):
            msgs = r["prompt"] + r[side]
            return fit((i, side), msgs, [0] * len(r["prompt"]) + [1 if m["role"] == "assistant" else 0 for m in r[side]])

        pairs = [(enc(i, r, "chosen"), enc(i, r, "rejected")) for i, r in enumerate(recs)]
        pairs = [p for p in pairs if p[0] is not None and p[1] is not None]
        recs = pairs
        self.records = len(pairs)
        self.chosen = Batch([c for c, _ in pairs], be.pad, args.micro_batch)
        self.rejected = Batch([r for _, r in pairs], be.pad, args.micro_batch)
        self.ref_c = self.seq_logps(self.chosen, be.ref_logps)
        self.ref_r = self.seq_logps(self.rejected, be.ref_logps)
        self.n = float(global_sum(torch.tensor(float(len(recs)))))

    def batches(self):
        return [self.chosen, self.rejected]

    def seq_logps(self, batch, fn):
        return (batch.per_token(fn, self.be.dev) * batch.mask).sum(-1)

    def chunks(self):
        for rows, _ in self.chosen.chunks():
            yield rows, None

    def margins(self, model, rows):
        out = []
        for batch, ref in ((self.chosen, self.ref_c), (self.rejected, self.ref_r)):
            width = max(batch.lens[rows])
            lp = self.be.logps(model, *batch.inputs(rows, width, self.be.dev))
            seq = (lp * batch.mask[rows, : width - 1].to(lp.device)).sum(-1)
            out.append(seq - ref[rows].to(lp.device))
        return out[0] - out[1]

    def part(self, model, rows, width):
        return -F.logsigmoid(self.beta * self.margins(model, rows)).sum() / self.n

    def evaluate(self, model):
        with torch.no_grad():
            m = torch.cat([self.margins(model, rows).float().cpu() for rows, _ in self.chunks()])
        return {"dpo_loss": -F.logsigmoid(self.beta * m).mean().item(),
                "dpo_margin": (self.beta * m).mean().item(),
                "dpo_accuracy": (m > 0).float().mean().item()}


class GRPO(Objective):
    def __init__(self, be, recs, args, model, fit):
        self.be, self.args = be, args
        seqs = [fit(i, r["prompt"] + r["completion"], [0] * len(r["prompt"]) + r["completion_mask"]) for i, r in enumerate(recs)]
        elided = fit.elided_records
        recs = [dict(r, _elided=i in elided) for i, (r, x) in enumerate(zip(recs, seqs)) if x is not None]
        self.records = len(recs)
        self.batch = b = Batch([x for x in seqs if x is not None], be.pad, args.micro_batch)
        self.chunks = b.chunks
        self.adv = torch.tensor([float(r["advantage"]) for r in recs])
        self.w = torch.tensor([float(r.get("weight", 1.0)) for r in recs])
        self.ntok = global_sum(b.mask.sum()).clamp(min=1)
        self.nseq = float(global_sum(torch.tensor(float(b.n))))
        self.ref = b.per_token(be.ref_logps, be.dev)
        self.old = b.per_token(lambda ids, attn: be.logps(model, ids, attn), be.dev)
        recorded = self.recorded_old(recs, b.mask)
        if recorded is not None:
            self.old = recorded

    def recorded_old(self, recs, mask):
        """The sampler's logprobs replace π_old only on the hf backend, only
        when every sample is rendered exactly as it was sampled (same
        observation role, nothing elided) and only when they cover exactly
        the trained tokens of every sample."""
        if self.be.name != "hf":
            return None
        if any(r.get("same_context") is False or r.get("_elided") for r in recs):
            return None
        old = self.old.clone()
        for i, r in enumerate(recs):
            flat = [x for turn in r.get("completion_logprobs") or [] for x in turn]
            pos = mask[i].nonzero().squeeze(-1)
            if len(flat) != len(pos):
                return None
            old[i, pos] = torch.tensor(flat, dtype=old.dtype)
        return old

    def per_token(self, model, rows, width):
        """Per-token objective (to maximise) and the mask, on the device."""
        b, a = self.batch, self.args
        lp = self.be.logps(model, *b.inputs(rows, width, self.be.dev))
        dev, cut = lp.device, (rows, slice(0, width - 1))
        ratio = torch.exp(lp - self.old[cut].to(dev))
        adv = self.adv[rows].to(dev).unsqueeze(-1)
        surr = torch.min(ratio * adv, torch.clamp(ratio, 1 - a.clip_eps, 1 + a.clip_eps) * adv)
        delta = torch.clamp(self.ref[cut].to(dev) - lp, -20, 20)
        k3 = torch.clamp(torch.exp(delta) - delta - 1, max=10)
        return (surr - a.kl_coef * k3) * self.w[rows].to(dev).unsqueeze(-1), b.mask[cut].to(dev), lp, k3

    def part(self, model, rows, width):
        per_tok, mask, _, _ = self.per_token(model, rows, width)
        if self.args.agg == "seq":
            return -((per_tok * mask).sum(-1) / mask.sum(-1).clamp(min=1)).sum() / self.nseq
        return -(per_tok * mask).sum() / self.ntok.to(per_tok.device)

    def evaluate(self, model):
        per_seq, kl = [], 0.0
        with torch.no_grad():
            for rows, width in self.chunks():
                _, mask, lp, k3 = self.per_token(model, rows, width)
                per_seq.append(((lp * mask).sum(-1) / mask.sum(-1).clamp(min=1)).float().cpu())
                kl += (k3 * mask).sum().item()
        per_seq = torch.cat(per_seq)
        out = {"grpo_loss": self.loss(model), "kl": kl / self.ntok.item()}
        for name, sel in (("pos", self.adv > 0), ("neg", self.adv < 0)):
            out[name + "_logp"] = per_seq[sel].mean().item() if sel.any() else None
        return out


# ---------------------------------------------------------------- data parallel
#
# Under torchrun (WORLD_SIZE > 1) each rank trains on its shard of the batch
# (records rank, rank + world, ...). The losses are normalised by counts
# summed over all ranks (tokens, pairs, sequences), so the gradients summed
# over ranks (all_reduce after each step's backward) are the gradient of the
# whole batch: every rank takes the same step, and the result matches one
# process trained on the union (TestTrainStepDataParallel).


def dist_on():
    import torch.distributed as dist
    return dist.is_available() and dist.is_initialized()


def global_sum(t):
    """t summed over the ranks (t itself without data parallelism)."""
    if not dist_on():
        return t
    import torch.distributed as dist
    t = t.detach().float().clone()
    dist.all_reduce(t)
    return t


def init_distributed():
    """Joins the process group torchrun set up (gloo on the CPU, nccl on
    GPUs); returns (rank, world). The collective timeout
    (MEDGYM_DIST_TIMEOUT_S, default a day) covers a resident worker's ranks
    waiting for the next request while an online iteration samples."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch.distributed as dist
    backend = os.environ.get("MEDGYM_DIST_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    from datetime import timedelta
    dist.init_process_group(backend, timeout=timedelta(seconds=float(os.environ.get("MEDGYM_DIST_TIMEOUT_S", "86400"))))
    return dist.get_rank(), dist.get_world_size()


def all_reduce_grads(params):
    if not dist_on():
        return
    import torch.distributed as dist
    for q in params:
        if q.grad is not None:
            dist.all_reduce(q.grad)


# ---------------------------------------------------------------- recipes

# Per-mode defaults of the paper (upstream §6.2, ../shared/notes/upstream.md):
# SFT AdamW lr 1e-4; DPO lr 5e-6, β 0.1; GRPO lr 1e-5, KL coefficient 1e-3
# (rollout temperature 0.6 is the online loop's). The tiny model trains from
# scratch and needs a larger step: 3e-3 in every mode.
RECIPES = {
    "hf": {"sft": {"lr": 1e-4}, "dpo": {"lr": 5e-6, "beta": 0.1}, "grpo": {"lr": 1e-5, "kl_coef": 1e-3}},
    "tiny": {"sft": {"lr": 3e-3}, "dpo": {"lr": 3e-3, "beta": 0.1}, "grpo": {"lr": 3e-3, "kl_coef": 1e-3}},
}


def recipe(backend, mode, over):
    """The mode's defaults for the backend, with every value given in over
    (None: not given) taking precedence."""
    r = {"lr": None, "beta": 0.1, "kl_coef": 1e-3, "clip_eps": 0.2, "steps": 20, "agg": "token",
         "max_len": DEFAULT_MAX_LEN, "micro_batch": 4}
    r.update(RECIPES[backend][mode])
    r.update({k: v for k, v in over.items() if v is not None})
    return r


DEFAULT_MAX_LEN = 8192  # keep equal to train.DefaultMaxLen (Go): the data card reports what fits


# ---------------------------------------------------------------- trainer


class Trainer:
    """A backend with its model loaded once, and an optimiser per mode kept
    across steps: the resident worker (worker.py) holds one for a whole
    online run or training job; train_step.py makes one per invocation."""

    def __init__(self, args):
        self.args = args
        self.be = make_backend(args)
        self.opts = {}

    def params(self):
        return [q for q in self.be.model.parameters() if q.requires_grad]

    def optimizer(self, mode, lr):
        opt = self.opts.get(mode)
        if opt is None:
            opt = self.opts[mode] = torch.optim.AdamW(self.params(), lr=lr)
        for g in opt.param_groups:
            g["lr"] = lr
        return opt

    def step(self, mode, recs, over, evaluate=True):
        """Trains steps on recs; returns the metrics (recipe, loss per step,
        before/after evaluations when evaluate, length handling)."""
        t0 = time.time()
        rc = recipe(self.be.name, mode, over)
        a = argparse.Namespace(**rc)
        if mode == "grpo":
            recs = [r for r in recs if any(r.get("completion_mask") or [])]
        metrics = {"mode": mode, "backend": self.be.name, "records": len(recs), "steps": 0, "loss": [], "recipe": rc}
        fit = Fitter(self.be, a.max_len)
        model = self.be.model
        model.train()
        obj = None
        if recs:
            obj = {"sft": lambda: SFT(self.be, recs, a, fit), "dpo": lambda: DPO(self.be, recs, a, fit),
                   "grpo": lambda: GRPO(self.be, recs, a, model, fit)}[mode]()
        metrics["length"] = fit.stats()
        if obj is None or obj.records == 0:
            metrics.update(skipped="empty batch" if not recs else "no record fits max_len", seconds=time.time() - t0)
            return metrics
        metrics["trained_records"] = obj.records
        if evaluate:
            metrics["before"] = obj.evaluate(model)
        opt = self.optimizer(mode, a.lr)
        cuda = torch.cuda.is_available() and self.be.dev == "cuda"
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t_steps = time.time()
        for _ in range(a.steps):
            opt.zero_grad()
            loss = 0.0
            for rows, width in obj.chunks():
                part = obj.part(model, rows, width)
                part.backward()
                loss += part.item()
            all_reduce_grads(self.params())
            loss = float(global_sum(torch.tensor(loss)))
            if not math.isfinite(loss):
                raise FloatingPointError("loss is not finite")
            torch.nn.utils.clip_grad_norm_(self.params(), 1.0)
            opt.step()
            metrics["loss"].append(loss)
            metrics["steps"] += 1
        if cuda:
            torch.cuda.synchronize()
            metrics["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 2**30
        metrics["steps_s"] = time.time() - t_steps
        metrics["tokens_trained"] = obj.tokens() * a.steps
        if evaluate:
            metrics["after"] = obj.evaluate(model)
        metrics.update(lr=a.lr, seconds=time.time() - t0)
        return metrics

    def score(self, recs, max_len=DEFAULT_MAX_LEN):
        """Trajectory-verifier scores: for each record's messages (a user
        turn holding the rendered trajectory and the question, as the
        verifier export writes them; a trailing assistant label is ignored)
        the probability of answering YES rather than NO,
        exp(lp YES)/(exp(lp YES) + exp(lp NO)) with lp the log-probability of
        the whole answer turn (upstream §6.2 reads the logits of the YES/NO
        token; with a multi-token answer this is the same ratio). A record
        that does not fit max_len is scored from its fitted form (elided
        observations) or, if it cannot fit, gets None."""
        fit = Fitter(self.be, max_len)
        model = self.be.model
        model.eval()
        out = []
        with torch.no_grad():
            for i, r in enumerate(recs):
                msgs = [m for m in r["messages"] if m["role"] != "assistant"]
                lps = []
                for ans in ("YES", "NO"):
                    conv = msgs + [{"role": "assistant", "content": ans}]
                    enc = fit((i, ans), conv, [0] * len(msgs) + [1])
                    if enc is None:
                        break
                    ids, lm = enc
                    x = torch.tensor([ids], device=self.be.dev)
                    lp = self.be.logps(model, x, torch.ones_like(x))[0].float().cpu()
                    lps.append(float((lp * torch.tensor(lm[1:], dtype=torch.float32)).sum()))
                out.append(None if len(lps) < 2 else 1 / (1 + math.exp(min(50.0, lps[1] - lps[0]))))
        model.train()
        return out

    def save(self, out):
        """Writes the adapter (or checkpoint) and the optimiser states."""
        self.be.save(out)
        torch.save({m: o.state_dict() for m, o in self.opts.items()}, os.path.join(out, "optimizer.pt"))

    def load_optimizer(self, init):
        path = os.path.join(init or "", "optimizer.pt")
        if not init or not os.path.exists(path):
            return False
        states = torch.load(path, map_location="cpu")
        for mode, st in states.items():
            lr = st["param_groups"][0]["lr"] if st.get("param_groups") else 1e-5
            self.optimizer(mode, lr).load_state_dict(st)
        return True


# ---------------------------------------------------------------- main


def add_common(p):
    """Arguments shared by train_step.py and worker.py: the model."""
    p.add_argument("--backend", default="auto", choices=["auto", "tiny", "hf"])
    p.add_argument("--model", default="", help="Hugging Face model id or path (hf backend)")
    p.add_argument("--init", default="", help="adapter / checkpoint to start from")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--grad-ckpt", action="store_true")
    p.add_argument("--seed", type=int, default=0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", required=True, choices=["sft", "dpo", "grpo"])
    p.add_argument("--data", required=True, help="JSONL batch")
    p.add_argument("--out", required=True, help="adapter / checkpoint directory to write")
    p.add_argument("--metrics", default="", help="metrics JSON (default OUT/metrics.json)")
    add_common(p)
    p.add_argument("--steps", type=int, default=None, help="optimisation steps (default 20)")
    p.add_argument("--lr", type=float, default=None, help="default per mode: SFT 1e-4, DPO 5e-6, GRPO 1e-5 (hf)")
    p.add_argument("--beta", type=float, default=None, help="DPO β (default 0.1)")
    p.add_argument("--clip-eps", type=float, default=None, help="GRPO ratio clip (default 0.2)")
    p.add_argument("--kl-coef", type=float, default=None, help="GRPO k3 KL coefficient (default 1e-3, upstream §6.2)")
    p.add_argument("--agg", default=None, choices=["token", "seq"])
    p.add_argument("--max-len", type=int, default=None,
                   help="tokens per conversation (default %d); longer ones lose middle observations, then are dropped" % DEFAULT_MAX_LEN)
    p.add_argument("--micro-batch", type=int, default=None,
                   help="sequences per forward/backward; gradients accumulate over the batch (0: all at once; default 4)")
    args = p.parse_args(argv)

    rank, world = init_distributed()
    random.seed(args.seed)
    torch.manual_seed(args.seed)  # the same initial model on every rank
    t0 = time.time()
    recs = read_jsonl(args.data)
    if world > 1:
        recs = recs[rank::world]
        if rank > 0:  # rank 0 writes OUT; the others OUT.rankN (equal to it: tests compare them)
            args.out += ".rank%d" % rank
            args.metrics = (args.metrics or os.path.join(args.out, "metrics.json")) + ".rank%d" % rank
    tr = Trainer(args)
    tr.load_optimizer(args.init)
    over = {k: getattr(args, k) for k in ("lr", "beta", "kl_coef", "clip_eps", "steps", "agg", "max_len", "micro_batch")}
    metrics = tr.step(args.mode, recs, over)
    tr.save(args.out)
    metrics.update(seconds=time.time() - t0, out=args.out, rank=rank, world=world)
    write_metrics(args.metrics or os.path.join(args.out, "metrics.json"), metrics)
    print(json.dumps({k: metrics.get(k) for k in ("mode", "backend", "records", "steps", "before", "after", "length")}))
    return 0


def write_metrics(path, metrics):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(metrics, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FloatingPointError as e:
        sys.exit("train_step: %s" % e)
