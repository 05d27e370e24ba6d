"""End to end: TRL's GRPOTrainer trains a tiny randomly initialised causal LM through medgym.trl.MedGymToolEnv against
a live ``medgym env serve`` (CPU, no download).

1. Two TREQS tasks' reference replies come from ``medgym run --policy reference`` (its stored rows).
2. A byte-level BPE tokenizer is trained on those conversations, a 2-layer Qwen2 is built at random, and a few SFT
   steps on the reference replies (as tool calls, rendered by Qwen2.5's chat template) teach it to emit parseable
   actions.
3. Two GRPO steps, 2 prompts x 4 generations each, every rollout a server session: the model's tool calls run in
   medgym's sandbox and the verifier's reward is what TRL optimises.
Asserts: stored rows = steps x prompts x generations; the rewards stored are the rewards TRL logged (per sample and
per step); the weights changed; the sessions ran the tool-calling prompt (no JSON reply format) and TRL registered
exactly the tools the server offers (the task's permitted actions: no terminal for TREQS).
"""

from __future__ import annotations

import os

import pytest
from conftest import DATASET, SPLIT, reference_action, run_id

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

import datasets  # noqa: E402
import tinylm  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from medgym.trl import MedGymToolEnv, tool_names  # noqa: E402

STEPS, PROMPTS, GENERATIONS = 2, 2, 4


def env_tools(env: type) -> list:
    """The tools TRL exposes for an environment class, in its order (inspect.getmembers: by name)."""
    import inspect

    return [
        f
        for name, f in inspect.getmembers(env, predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def sft_pairs(tokenizer, env: type, reference: list[dict], prompts: dict) -> list[tuple[str, str]]:
    """(prompt text, completion text) per reference episode: the session's prompt (tools mode) as GRPOTrainer renders
    it (tools included) and the reference action as a tool call in the chat template's format."""
    pairs = []
    for row in reference:
        prompt = prompts[row["task_id"]]
        act = reference_action(row)
        call = {"type": "function", "function": {"name": act["action"], "arguments": act["params"]}}
        p = tokenizer.apply_chat_template(prompt, tools=env_tools(env), add_generation_prompt=True, tokenize=False)
        full = tokenizer.apply_chat_template(
            prompt + [{"role": "assistant", "content": "", "tool_calls": [call]}], tools=env_tools(env), tokenize=False
        )
        assert full.startswith(p)
        pairs.append((p, full[len(p) :].rstrip("\n")))
    return pairs


def test_grpo_through_medgym(server, reference, tmp_path):
    checked = server.client()
    # MedGymToolEnv.factory's environments, on a client whose responses are checked (conftest).
    grpo_through_medgym(server, reference, tmp_path, MedGymToolEnv,
                        lambda env, rid: lambda: env(checked, {"run_id": rid, "max_turns": 3}))
    checked.close()


def grpo_through_medgym(server, reference, tmp_path, env_class: type, factory) -> None:
    """Two GRPO steps through env_class's environments (factory(env, run_id): the trainer's environment_factory, env
    being env_class with the server's tools) and the checks of the module's doc."""
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)  # the 2-core CI machine: more threads only contend
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    checked = server.client()
    # The tool-calling prompt and tools, as the server offers them for the dataset's tasks (prompt_mode tools): the
    # environment registers exactly those, and the prompt describes them instead of medgym's JSON reply format.
    names = tool_names(checked, DATASET, split=SPLIT)
    env = env_class.with_actions(names)
    offered = {}
    prompts = {}
    for row in reference:
        p = checked.prompt(row["task_id"], dataset=row["dataset"], split=row["split"], prompt_mode="tools")
        prompts[row["task_id"]] = [{"role": m["role"], "content": m["content"]} for m in p["messages"]]
        offered[row["task_id"]] = [t["function"]["name"] for t in p["tools"]]
        system = prompts[row["task_id"]][0]["content"]
        assert "JSON" not in system and "Each reply calls exactly one of the tools " + ", ".join(names) in system, system
    assert all(o == names for o in offered.values()) and "terminal" not in names, (names, offered)
    assert sorted(f.__name__ for f in env_tools(env)) == sorted(names)

    # Tokenizer: rendering needs a tokenizer with the chat template; train a throwaway one, render the conversations,
    # then train the real one on them (so the prompts are a few hundred tokens).
    texts = [m["content"] for row in reference for m in row["messages"]] + [m["content"] for p in prompts.values() for m in p]
    bootstrap = tinylm.build_tokenizer(texts, vocab_size=300)
    rendered = [p + c for p, c in sft_pairs(bootstrap, env, reference, prompts)]
    tokenizer = tinylm.build_tokenizer(rendered, vocab_size=2000)
    pairs = sft_pairs(tokenizer, env, reference, prompts)
    for p, c in pairs:
        assert tokenizer.decode(tokenizer(p + c, add_special_tokens=False)["input_ids"]) == p + c

    model = tinylm.build_model(tokenizer, seed=0)
    losses = tinylm.sft(model, tokenizer, pairs, steps=int(os.environ.get("MEDGYM_E2E_SFT_STEPS", "120")), lr=3e-3)
    assert losses[-1] < losses[0] / 10, f"SFT did not learn: {losses[:3]} ... {losses[-3:]}"

    rid = run_id("trl")
    train = datasets.Dataset.from_list(
        [
            {"prompt": prompts[row["task_id"]], "task_id": row["task_id"], "dataset": row["dataset"], "split": row["split"]}
            for row in reference
        ]
    )
    assert len(train) == PROMPTS
    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        max_steps=STEPS,
        per_device_train_batch_size=PROMPTS * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=160,
        max_tool_calling_iterations=1,
        temperature=1.0,
        learning_rate=1e-3,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=train,
        environment_factory=factory(env, rid),
    )
    # TRL registered the server's tools, no more (a forbidden action is no tool the model can call).
    assert sorted(f.__name__ for f in trainer._env_tools[None]) == sorted(names)
    logged: list[list[float]] = []

    class Rewards(TrainerCallback):
        # TRL keeps the latest generation batch's per-sample rewards, by reward source, in trainer._logs.
        def on_step_end(self, args, state, control, **kw):
            logged.append(list(trainer._logs["rewards"][env.__name__]))

    trainer.add_callback(Rewards())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    checked.close()

    # Stored rows = steps x prompts x generations: every rollout is one session, stored once.
    rows = server.rows(rid)
    history = [h for h in trainer.state.log_history if "reward" in h]
    print("stored:", [(r["task_id"], r["sample_index"], r["outcome"], r["reward"]) for r in rows])
    print("logged:", logged, [(h["reward"], h.get("tools/call_frequency")) for h in history])
    assert len(rows) == STEPS * PROMPTS * GENERATIONS
    # Every session ran the tool-calling prompt TRL's dataset carried.
    assert all([{"role": m["role"], "content": m["content"]} for m in r["messages"][:2]] == prompts[r["task_id"]] for r in rows)
    assert sorted((r["task_id"], r["sample_index"]) for r in rows) == sorted(
        (row["task_id"], k) for row in reference for k in range(STEPS * GENERATIONS)
    )

    # The rewards stored are the rewards TRL logged: per sample (as multisets per step: a step's rollouts are each
    # task's samples GENERATIONS*step .. GENERATIONS*(step+1)-1) and the logged per-step means.
    assert len(logged) == STEPS and len(history) == STEPS
    for step in range(STEPS):
        stored = [r["reward"] for r in rows if step * GENERATIONS <= r["sample_index"] < (step + 1) * GENERATIONS]
        assert sorted(stored) == sorted(logged[step]), f"step {step}: stored {stored}, TRL logged {logged[step]}"
        assert history[step]["reward"] == pytest.approx(sum(stored) / len(stored))

    # The model emitted parseable actions that medgym executed, and the rewards varied (or GRPO learns nothing).
    assert any(r["num_turns"] >= 1 for r in rows), "no rollout made a tool call medgym executed"
    assert len({r["reward"] for r in rows}) > 1, "every rollout got the same reward: no GRPO signal"

    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed, "GRPO changed no weight"
    print(f"{len(changed)} of {len(before)} weight tensors changed; outcomes {sorted(r['outcome'] for r in rows)}")
