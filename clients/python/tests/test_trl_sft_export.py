"""The trainer's SFT export keeps masked turns out of TRL's loss (CPU, no download, no server).

testdata/export_sft.jsonl and testdata/export_trl.jsonl are what ``trainer build`` writes to sft/sft.jsonl and
sft/trl.jsonl for three episodes (services/trainer/train/trl_test.go builds them and fails when they drift): one with
two assistant turns that failed to parse (content ``!BADTURN ...``, ``loss_mask`` 0) between good ones, one clean,
one failed (not exported). TRL 1.16's SFTTrainer prepares sft/trl.jsonl as a user would load it, its collator makes
the batch, and every token that carries loss (label != -100) is checked: it must belong to an assistant turn the
export's ``loss_mask`` trains, and every such turn must carry loss in some record. Then two optimiser steps run.
Negative control: the same check on sft/sft.jsonl (``messages`` + ``loss_mask``, which TRL ignores) finds the
masked turns in the loss, with and without ``assistant_only_loss``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

import datasets  # noqa: E402
import tinylm  # noqa: E402

DATA = Path(__file__).resolve().parent / "testdata"


def records(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def turns(sft: list[dict]) -> tuple[set[str], set[str]]:
    """The contents of the assistant turns the export trains (loss_mask 1) and of the ones it masks."""
    trained, masked = set(), set()
    for r in sft:
        for m, w in zip(r["messages"], r["loss_mask"], strict=True):
            if m["role"] == "assistant":
                (trained if w == 1 else masked).add(m["content"])
    return trained, masked


def loss_texts(name: str, tmp_path: Path, **config) -> tuple[list[str], "trl.SFTTrainer"]:
    """Prepare testdata/<name> with TRL's SFTTrainer on a tiny model and return, per example of the collated batch,
    the text of the tokens that carry loss (label != -100), and the trainer."""
    from trl import SFTConfig, SFTTrainer

    torch.set_num_threads(1)
    sft = records("export_sft.jsonl")
    tokenizer = tinylm.build_tokenizer([m["content"] for r in sft for m in r["messages"]], vocab_size=400)
    model = tinylm.build_model(tokenizer, seed=0)
    ds = datasets.load_dataset("json", data_files=str(DATA / name), split="train")
    args = SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
        **config,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    prepared = trainer.train_dataset
    batch = trainer.data_collator([prepared[i] for i in range(len(prepared))])
    texts = []
    for ids, labels in zip(batch["input_ids"], batch["labels"], strict=True):
        texts.append(tokenizer.decode(ids[labels != -100]))
    return texts, trainer


def leaks(texts: list[str], sft: list[dict]) -> list[str]:
    """Loss-carrying text that is no trained assistant turn (a masked turn, an observation, the task...): what is
    left of each example's loss text once the trained turns and the end-of-turn markup are taken out."""
    trained, _ = turns(sft)
    found = []
    for t in texts:
        for c in sorted(trained, key=len, reverse=True):
            t = t.replace(c, "")
        if t.replace("<|im_end|>", "").strip():
            found.append(t)
    return found


def test_trl_export_keeps_masked_turns_out_of_the_loss(tmp_path):
    sft = records("export_sft.jsonl")
    trained, masked = turns(sft)
    assert masked == {"!BADTURN one", "!BADTURN two"} and len(trained) == 3, "the fixture must hold masked turns"

    texts, trainer = loss_texts("export_trl.jsonl", tmp_path)
    assert trainer.args.completion_only_loss is None and trainer.completion_only_loss  # TRL's default for the layout
    assert leaks(texts, sft) == [], texts
    assert not any("BADTURN" in t for t in texts), texts
    for c in trained:  # every turn the export trains carries loss somewhere
        assert any(c in t for t in texts), (c, texts)

    before = [p.detach().clone() for p in trainer.model.parameters()]
    out = trainer.train()
    assert out.global_step == 2 and torch.isfinite(torch.tensor(out.training_loss))
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters()))


@pytest.mark.parametrize("assistant_only_loss", [False, True])
def test_messages_with_loss_mask_train_masked_turns(tmp_path, assistant_only_loss):
    """The old way (TRL on sft.jsonl's ``messages``): TRL ignores ``loss_mask``, so the masked turns carry loss."""
    texts, _ = loss_texts("export_sft.jsonl", tmp_path, assistant_only_loss=assistant_only_loss)
    assert any("BADTURN one" in t for t in texts), texts
    assert leaks(texts, records("export_sft.jsonl"))
