"""A tiny causal LM and tokenizer built from nothing (no download), for the TRL end-to-end test.

- tokenizer: a byte-level BPE trained with ``tokenizers`` on the texts the test will show the model (so it
  round-trips any text exactly: the tool calls it emits must decode to the same JSON), with Qwen2.5's special tokens
  and Qwen2.5's chat template as TRL ships it (``trl.chat_template_utils.qwen2_5_chat_template``), one whose tool
  calls TRL knows how to parse;
- model: a randomly initialised 2-layer Qwen2ForCausalLM;
- :func:`sft`: a plain supervised warm start on (prompt, completion) pairs, loss on the completion only.
"""

from __future__ import annotations

import random
from typing import Iterable

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2.5 has these as added (non-special) tokens; as single tokens they make the tool-call markup short.
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"]


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 2000) -> PreTrainedTokenizerFast:
    from trl.chat_template_utils import qwen2_5_chat_template

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
    )
    fast.add_tokens(ADDED)
    fast.chat_template = qwen2_5_chat_template
    return fast


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=96,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def sft(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    pairs: list[tuple[str, str]],
    steps: int,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Train on (prompt text, completion text) pairs for ``steps`` steps (one pair a step); returns the losses."""
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    encoded = []
    for prompt, completion in pairs:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([p + c])
        labels = torch.tensor([[-100] * len(p) + c])
        encoded.append((ids, labels))
    model.train()
    losses = []
    for _ in range(steps):
        ids, labels = rng.choice(encoded)
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(out.loss.item())
    return losses
