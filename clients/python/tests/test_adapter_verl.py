"""verl 0.9: medgym.verl_agent.MedGymAgentLoop registered through verl's agent loop config file
(rollout.agent.agent_loop_config_path) and run by verl's own AgentLoopWorker over the rows of `medgym export`'s verl
dataset, read by verl's RLHFDataset and batched as verl's trainer batches them. The worker is verl's, built from verl's
own trainer config with a local tiny model (tokenizer and config only: nothing downloaded); the generation server
(vLLM's or SGLang's in training) is a stand-in that answers token ids with the reference test model's replies."""

import asyncio
from pathlib import Path

import pyarrow.parquet as pq

from adapters_live import chatml_tokenizer, export, fake_model, hesitant_reply, medgym_server, wait_rows, framework  # noqa: F401

framework("verl", "verl.experimental.agent_loop.agent_loop")
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402


class Server:
    """verl's LLMServerClient.generate (ids in, ids and logprobs out), answered by the reference test model: a first
    reply that is no action, then the reference solution (two turns an episode), the EOS kept in the completion."""

    def __init__(self, model_url, tok):
        self.model_url, self.tok = model_url, tok
        self.generated = []  # (prompt ids, completion ids, logprobs) in order

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        reply = await asyncio.to_thread(hesitant_reply, self.model_url, self.tok.decode(prompt_ids))
        ids = self.tok(reply, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        lps = [-0.25 * (k % 4) for k in range(len(ids))]
        self.generated.append((list(prompt_ids), ids, lps))
        return TokenOutput(token_ids=ids, log_probs=lps)


def _model_dir(tmp_path: Path) -> Path:
    """A local model directory verl's HFModelConfig loads: the ChatML tokenizer and a tiny Qwen2 config."""
    from transformers import Qwen2Config

    d = tmp_path / "model"
    tok = chatml_tokenizer()
    tok.save_pretrained(d)
    Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, eos_token_id=tok.eos_token_id, architectures=["Qwen2ForCausalLM"]).save_pretrained(d)
    return d


def _config(tmp_path: Path, url: str, *, max_assistant_turns: int):
    """verl's own trainer config (the packaged defaults) with the agent loop config file naming medgym's loop."""
    import verl

    loops = tmp_path / "medgym_agent.yaml"
    loops.write_text("- name: medgym_agent\n  _target_: medgym.verl_agent.MedGymAgentLoop\n"
                     f"  base_url: \"{url}\"\n  options: {{max_turns: 5}}\n")
    cfg = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    over = {
        "actor_rollout_ref.model.path": str(_model_dir(tmp_path)),
        "actor_rollout_ref.rollout.name": "vllm",  # the engine verl generates with (the stand-in server here)
        "actor_rollout_ref.rollout.prompt_length": 1 << 15,  # a byte-level tokenizer: a token a byte
        "actor_rollout_ref.rollout.response_length": 1 << 15,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": max_assistant_turns,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(loops),
        "actor_rollout_ref.rollout.agent.default_agent_loop": "medgym_agent",
        "data.return_raw_chat": True,
    }
    for k, v in over.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    return cfg


def _batch(tmp_path: Path, tok) -> tuple[DataProto, list[dict]]:
    """The exported rows as verl's trainer batches them (RLHFDataset, collate_fn, DataProto.from_single_dict)."""
    path = export(tmp_path) / "verl" / "medcalcbench_test.parquet"
    rows = pq.read_table(path).to_pylist()
    assert all(r["reward_model"]["ground_truth"] == f"medgym://medcalcbench/test/{r['extra_info']['task_id']}" for r in rows)
    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 1 << 20, "return_raw_chat": True,
                            "filter_overlong_prompts": False, "cache_dir": str(tmp_path / "cache")})
    ds = RLHFDataset(data_files=[str(path)], tokenizer=tok, config=cfg)
    return DataProto.from_single_dict(collate_fn([ds[i] for i in range(len(ds))])), rows


def _stored(store, episode: dict) -> dict:
    rows = [r for r in wait_rows(store, episode["run_id"], 1) if r["episode_id"] == episode["episode_id"]]
    assert len(rows) == 1, rows
    return rows[0]


def _rollouts(tmp_path: Path, url: str, model_url: str, *, max_assistant_turns: int):
    """verl's AgentLoopWorker (built from the config) generating the exported rows' batch: (its output, the rows, the
    generation server, the tokenizer)."""
    tok = chatml_tokenizer()
    server = Server(model_url, tok)
    worker = AgentLoopWorker(_config(tmp_path, url, max_assistant_turns=max_assistant_turns), server)
    batch, rows = _batch(tmp_path, tok)
    return asyncio.run(worker.generate_sequences(batch)), rows, server, tok


def test_verl_agent_loop_puts_the_verifiers_reward_in_the_batch(medgym_server, fake_model, tmp_path):
    url, store = medgym_server
    out, rows, server, tok = _rollouts(tmp_path, url, fake_model, max_assistant_turns=8)

    # the verifier's reward reaches verl's batch as the score at each response's last token
    assert out.batch["rm_scores"].sum(dim=1).tolist() == [1.0, 1.0]
    assert len(server.generated) == 4  # two rollouts (run concurrently) of two generations each
    for i, row in enumerate(rows):
        # each rollout is one stored episode of its row's task, scored by the verifier
        stored = _stored(store, out.non_tensor_batch["medgym_episode"][i])
        assert stored["task_id"] == row["extra_info"]["task_id"] and stored["reward"] == 1.0
        sid = out.non_tensor_batch["medgym_session_id"][i]
        assert [s.session_id for s in out.non_tensor_batch["turn_scores"][i]] == [sid, sid]
        # its turns hold the ids verl generated from and generated, with their logprobs; they re-tokenise to the
        # stored replies, and verl's response tokens with mask 1 (the ones it trains on) are those completions
        turns = stored["turns"]
        played = [(t["prompt_token_ids"], t["completion_token_ids"], t["completion_logprobs"]) for t in turns]
        assert len(played) == 2 and all(p in server.generated for p in played)
        replies = [m["content"] for m in stored["messages"] if m["role"] == "assistant"]
        assert [tok.decode(t["completion_token_ids"], skip_special_tokens=True) for t in turns] == replies
        assert [t["raw_text"] for t in turns] == replies
        mask = out.batch["response_mask"][i].bool()
        assert out.batch["responses"][i][mask].tolist() == [x for _, ids, _ in played for x in ids]
        assert out.batch["rollout_log_probs"][i][mask].tolist() == [x for _, _, lp in played for x in lp]
        # the episode's first prompt is the row's exported prompt as verl tokenises it (the session's prompt)
        text = tok.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, tokenize=False)
        assert played[0][0] == tok(text, add_special_tokens=False)["input_ids"]


def test_verl_cut_rollout_is_closed_scored_and_stored(medgym_server, fake_model, tmp_path):
    # verl's own limit (multi_turn.max_assistant_turns 1) cuts each rollout after its first reply, no action: the loop
    # closes the session, so the episode is scored (turn_limit, reward 0, in the batch) and stored, not reaped as
    # abandoned (which exports leave out, so a GRPO group would lose exactly its failures).
    url, store = medgym_server
    out, rows, server, _ = _rollouts(tmp_path, url, fake_model, max_assistant_turns=1)
    assert len(server.generated) == 2 and out.batch["rm_scores"].sum(dim=1).tolist() == [0.0, 0.0]
    for i in range(len(rows)):
        stored = _stored(store, out.non_tensor_batch["medgym_episode"][i])
        assert (stored["outcome"], stored["termination"], stored["reward"]) == ("turn_limit", "closed", 0.0)
        assert len(stored["turns"]) == 1
        assert [s.session_id for s in out.non_tensor_batch["turn_scores"][i]] == [out.non_tensor_batch["medgym_session_id"][i]]


def test_verl_reward_function_reads_the_stored_reward(medgym_server, fake_model, tmp_path):
    # medgym.verl.compute_score as verl's trainer loads it (reward.custom_reward_function), for a loop that does not
    # score its rollouts: it reads the reward stored for the session the turn scores name, never a gold answer.
    from verl.trainer.ppo.reward import get_custom_reward_fn

    url, _ = medgym_server
    out, rows, _, _ = _rollouts(tmp_path, url, fake_model, max_assistant_turns=8)
    cfg = OmegaConf.create({"reward": {"custom_reward_function": {"path": "pkg://medgym.verl", "name": "compute_score",
                                                                  "reward_kwargs": {"base_url": url}}}})
    fn = get_custom_reward_fn(cfg)
    for i, row in enumerate(rows):
        extra = {**row["extra_info"], "turn_scores": list(out.non_tensor_batch["turn_scores"][i])}
        assert fn(data_source=row["data_source"], solution_str="", ground_truth=row["reward_model"]["ground_truth"],
                  extra_info=extra) == 1.0
