"""OpenRLHF: medgym/openrlhf.py loaded as OpenRLHF loads an agent file (--train.agent_func_path), its AgentExecutor
(OpenRLHF's MultiTurnAgentExecutor) run over the rows of `medgym export`'s prompt-only dataset as OpenRLHF's
PromptDataset renders them, the reference test model standing in for vLLM's generation."""

import asyncio
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import medgym
from adapters_live import chatml_tokenizer, export, fake_model, hesitant_reply, medgym_server, model_reply, wait_rows, framework  # noqa: F401

framework("openrlhf", "openrlhf.utils.agent")
from openrlhf.datasets import PromptDataset  # noqa: E402
from openrlhf.utils.agent import AgentExecutorBase, MultiTurnAgentExecutor  # noqa: E402

class ModelEngine:
    """The generation side of OpenRLHF's rollout (vLLM there): decodes the token ids it is given, asks the reference
    test model to continue that transcript, and answers as vLLM's RequestOutput does: the completion's ids end with
    the EOS it stopped at, its text does not (skip_special_tokens), logprobs (a dict per token) only when asked."""

    def __init__(self, tokenizer, model_url):
        self.tokenizer, self.model_url, self.calls = tokenizer, model_url, 0

    def reply(self, transcript):
        return model_reply(self.model_url, [{"role": "user", "content": transcript}])


class Hesitant(ModelEngine):
    """The reference model after one reply that is no action: every episode takes two turns, so the environment's
    feedback sits between two generations."""

    def reply(self, transcript):
        return hesitant_reply(self.model_url, transcript)

    async def generate(self, token_ids, sampling_params, multi_modal_data=None):
        self.calls += 1
        reply = self.reply(self.tokenizer.decode(token_ids))
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        logprobs = None
        if sampling_params.logprobs is not None:
            logprobs = [{t: SimpleNamespace(logprob=-0.25 * (k % 4))} for k, t in enumerate(ids)]
        out = SimpleNamespace(token_ids=ids, text=reply, finish_reason="stop", logprobs=logprobs)
        return SimpleNamespace(outputs=[out])


def _load_agent_file():
    # As openrlhf.trainer.ray.vllm_engine._load_agent_executor does (that module needs vLLM and Ray).
    path = Path(medgym.__file__).with_name("openrlhf.py")
    spec = importlib.util.spec_from_file_location("agent_module", str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert issubclass(mod.AgentExecutor, AgentExecutorBase) and issubclass(mod.AgentExecutor, MultiTurnAgentExecutor)
    return mod.AgentExecutor()


def test_openrlhf_agent_plays_exported_rows(medgym_server, fake_model, tmp_path, monkeypatch):
    import time

    url, store = medgym_server
    rid = f"openrlhf-rows-{time.time_ns()}"
    monkeypatch.setenv("MEDGYM_URL", url)
    monkeypatch.setenv("MEDGYM_OPTIONS", f'{{"max_turns": 5, "run_id": "{rid}"}}')
    import datasets

    rows = datasets.Dataset.from_parquet(str(export(tmp_path) / "prompts" / "medcalcbench_test.parquet"))
    tok = chatml_tokenizer()
    data_args = SimpleNamespace(input_key="prompt", label_key="task_id", apply_chat_template=True)
    prompts = PromptDataset(rows, tok, SimpleNamespace(args=SimpleNamespace(data=data_args), is_rank_0=lambda: True))
    assert len(prompts) == 2
    executor = _load_agent_file()
    engine = Hesitant(tok, fake_model)
    transcripts = {}
    for i in range(len(prompts)):
        _, prompt, label, _ = prompts[i]
        assert label == rows[i]["task_id"] and prompt.startswith("<|im_start|>system\n")
        params = SimpleNamespace(max_tokens=None, logprobs=1 if i == 0 else None)  # with and without logprobs
        res = asyncio.run(executor.execute(prompt, label, params, 1 << 20, tok, engine))
        assert res["reward"] == 1.0 and float(res["scores"]) == 1.0, res
        assert res["extra_logs"]["accepted"] == 1.0
        transcript = tok.decode(res["observation_tokens"])
        assert len(res["action_ranges"]) >= 2 and transcript.startswith(prompt)
        # One close per turn: the generation's EOS closes the assistant turn, the feedback does not close it again.
        assert "<|im_end|><|im_end|>" not in transcript and transcript.count("<|im_end|>") == transcript.count("<|im_start|>")
        transcripts[label] = (res["observation_tokens"], res["action_ranges"], res["rollout_log_probs"])
    # Every episode was stored, under the run the options named.
    by_task = {x["task_id"]: x for x in wait_rows(store, rid, len(rows))}
    for i, r in enumerate(rows):
        stored = by_task[r["task_id"]]
        assert stored["outcome"] == "correct" and stored["reward"] == 1.0, stored["outcome"]
        ids, ranges, logprobs = transcripts[r["task_id"]]
        # Token-exact: every turn holds the ids OpenRLHF trains on (its action ranges of the transcript), which
        # re-tokenise to the stored reply, and the prompt it was generated from; the rendered conversation is the chat
        # template's over the stored messages.
        assert len(stored["turns"]) == len(ranges)
        replies = [m["content"] for m in stored["messages"] if m["role"] == "assistant"]
        for t, (a, b), reply in zip(stored["turns"], ranges, replies):
            assert t["completion_token_ids"] == ids[a:b] and t["prompt_token_ids"] == ids[:a]
            assert tok.decode(t["completion_token_ids"], skip_special_tokens=True) == t["raw_text"] == reply
            if i == 0:
                assert t["completion_logprobs"] == logprobs[a:b]
            else:
                assert not t["completion_logprobs"]
        template = tok.apply_chat_template([{"role": m["role"], "content": m["content"]} for m in stored["messages"]],
                                           tokenize=False)
        assert template.startswith(tok.decode(ids)), "the transcript is not the chat template's rendering"


def test_openrlhf_feedback_is_a_user_turn(medgym_server, monkeypatch):
    # An unparseable reply: not done, no reward, the observation comes back inside the ChatML user turn.
    url, _ = medgym_server
    monkeypatch.setenv("MEDGYM_URL", url)
    mod = _load_agent_file()
    inst = mod.agent_instance_cls()

    async def play():
        await inst.reset({"observation": "p", "label": "medgym://medcalcbench/test/medcalcbench-3"})
        out = await inst.step({"observation_text": "p", "action_text": "no action", "label": "", "sampling_params": None})
        await inst.session.close()
        return out

    out = asyncio.run(play())
    assert not out["done"] and float(out["rewards"]) == 0.0
    fb = out["environment_feedback"]
    assert fb.startswith("<|im_end|>\n<|im_start|>user\n") and fb.endswith("<|im_start|>assistant\n") and len(fb) > 60


class Unparseable(ModelEngine):
    """A model whose replies never parse: the episode never ends by itself."""

    async def generate(self, token_ids, sampling_params, multi_modal_data=None):
        self.calls += 1
        ids = self.tokenizer("not an action", add_special_tokens=False)["input_ids"]
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text="not an action", finish_reason="stop", logprobs=None)])


def test_openrlhf_budget_cut_is_scored_and_stored(medgym_server, monkeypatch):
    # OpenRLHF's loop stops when its token budget (max_length) runs out, without telling the instance; the executor
    # then ends the session, so the episode is stored scored (turn_limit, closed), not left to the reaper (abandoned).
    import time

    url, store = medgym_server
    rid = f"openrlhf-cut-{time.time_ns()}"
    monkeypatch.setenv("MEDGYM_URL", url)
    monkeypatch.setenv("MEDGYM_OPTIONS", f'{{"max_turns": 10, "run_id": "{rid}"}}')
    tok = chatml_tokenizer()
    executor = _load_agent_file()
    engine = Unparseable(tok, "")
    prompt = "<|im_start|>user\nWhat is 6 times 7?<|im_end|>\n<|im_start|>assistant\n"
    budget = len(tok(prompt, add_special_tokens=False)["input_ids"]) + 40  # one reply, then no room for the feedback
    res = asyncio.run(executor.execute(prompt, "medgym://medcalcbench/test/medcalcbench-3", SimpleNamespace(max_tokens=None, logprobs=None),
                                       budget, tok, engine))
    assert engine.calls == 1 and res["reward"] == 0.0
    rows = wait_rows(store, rid, 1)
    assert len(rows) == 1 and (rows[0]["outcome"], rows[0]["termination"], rows[0]["reward"]) == ("turn_limit", "closed", 0.0)
