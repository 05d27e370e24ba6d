#!/usr/bin/python3
"""Builds a randomly initialised Llama and a byte-level BPE tokenizer with a
ChatML chat template, with nothing downloaded: the CPU tests' hf model
(hf_check.py, the Go tests) and the GPU benchmark's ~1B model (gpu_bench.py).

  python3 tinyllama.py OUT      the tests' tiny model: tokenizer trained on ../testdata
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "..", "testdata")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def toy_texts():
    """The message texts of the toy batches in ../testdata."""
    for mode in ("sft", "dpo", "grpo"):
        for r in read_jsonl(os.path.join(TESTDATA, "toy_%s.jsonl" % mode)):
            for key in ("messages", "prompt", "chosen", "rejected", "completion"):
                for m in r.get(key) or []:
                    yield m["content"]


def build(path, texts, vocab_size, hidden, layers, intermediate=None, heads=None, kv_heads=None, model_vocab=None,
          max_positions=4096, dtype=None):
    """Trains the tokenizer on texts, saves it and a random Llama of the
    given shape to path; returns the parameter count."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(list(texts), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|im_start|>", "<|im_end|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|pad|>")
    tok.chat_template = CHATML
    tok.save_pretrained(path)
    cfg = LlamaConfig(vocab_size=model_vocab or len(tok), hidden_size=hidden, intermediate_size=intermediate or 2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads or max(1, hidden // 16),
                      num_key_value_heads=kv_heads or max(1, hidden // 32), max_position_embeddings=max_positions,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    if dtype is not None:
        model = model.to(dtype)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def build_tiny(path):
    """The CPU tests' model: hidden 64, 2 layers, a 600-token BPE over the toy batches."""
    return build(path, toy_texts(), 600, hidden=64, layers=2, intermediate=128, heads=4, kv_heads=2)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tinyllama.py OUT")
    print(json.dumps({"model": sys.argv[1], "params": build_tiny(sys.argv[1])}))
