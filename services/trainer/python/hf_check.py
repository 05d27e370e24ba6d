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

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "..", "testdata")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def toy_texts():
    for mode in ("sft", "dpo", "grpo"):
        for r in read_jsonl(os.path.join(TESTDATA, "toy_%s.jsonl" % mode)):
            for key in ("messages", "prompt", "chosen", "rejected", "completion"):
                for m in r.get(key) or []:
                    yield m["content"]


def build_model(path):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(list(toy_texts()), trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|im_start|>", "<|im_end|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|pad|>")
    tok.chat_template = CHATML
    tok.save_pretrained(path)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return tok


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def check_mask(model_dir):
    sys.path.insert(0, HERE)
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

    def __init__(self, model_dir, init=""):
        cmd = [sys.executable, os.path.join(HERE, "worker.py"), "--backend", "hf", "--model", model_dir, "--lora-r", "8"]
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

    def train(self, work, mode, tag=""):
        self.n += 1
        out = os.path.join(work, mode + tag)
        ans = self.send(json.dumps({"id": self.n, "op": "train", "mode": mode, "out": out, "recipe": RECIPE,
                                    "data": os.path.join(TESTDATA, "toy_%s.jsonl" % mode)}))
        check(ans.get("ok") and ans.get("id") == self.n, "worker %s: %s" % (mode, ans))
        m = ans["metrics"]
        check(m["backend"] == "hf" and m["steps"] == 15, "%s metrics: %s" % (mode, m))
        check_adapter(out, self.model_dir, mode)
        check(os.path.exists(os.path.join(out, "optimizer.pt")), "%s: no optimizer.pt" % mode)
        return out, m

    def close(self):
        ans = self.send(json.dumps({"op": "shutdown"}))
        check(ans.get("ok") and self.p.wait(timeout=60) == 0, "worker shutdown: %s" % ans)


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
        build_model(model_dir)
        summary["mask"] = check_mask(model_dir)
        _, m = run_step(model_dir, work, "sft")
        check(m["after"]["sft_loss"] < m["before"]["sft_loss"] - 0.5, "SFT loss did not fall: %s" % m)
        summary["sft_loss"] = [m["before"]["sft_loss"], m["after"]["sft_loss"]]
        w = Worker(model_dir)
        _, m = w.train(work, "grpo")
        b, e = m["before"], m["after"]
        check(e["pos_logp"] > b["pos_logp"] and e["neg_logp"] < b["neg_logp"] and e["kl"] > 0, "GRPO: %s" % m)
        summary["grpo_pos_logp"] = [b["pos_logp"], e["pos_logp"]]
        ans = w.send('{"op": "train", "mode": ')
        check(ans.get("ok") is False and "malformed" in ans.get("error", ""), "malformed request: %s" % ans)
        out, m = w.train(work, "dpo")  # the same worker, model and adapter: no new load
        check(m["after"]["dpo_margin"] > m["before"]["dpo_margin"] + 0.1, "DPO margin did not rise: %s" % m)
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
