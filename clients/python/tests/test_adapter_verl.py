"""verl: medgym.verl.MedGymInteraction loaded by verl's own interaction registry from an interaction config, driven as
verl's ToolAgentLoop drives it, over rows of `medgym export`'s verl dataset read by verl's RLHFDataset."""

import asyncio

import pyarrow.parquet as pq
import pytest

from adapters_live import chatml_tokenizer, export, fake_model, hesitant_reply, medgym_server, model_reply, no_gold, wait_rows, framework  # noqa: F401

framework("verl", "verl.interactions.base")
from verl.interactions.utils.interaction_registry import initialize_interactions_from_config  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402


def _tokenizer():
    # A local tokenizer with a chat template (nothing downloaded): RLHFDataset only tokenizes the prompts.
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "<eos>": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    t = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="<eos>")
    t.chat_template = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
                       "{% if add_generation_prompt %}<assistant>{% endif %}")
    return t


def _dataset(tmp_path):
    from omegaconf import OmegaConf

    path = export(tmp_path) / "verl" / "medcalcbench_test.parquet"
    table = pq.read_table(path).to_pylist()
    assert {r["reward_model"]["style"] for r in table} == {"rule"}
    assert all(r["reward_model"]["ground_truth"] == f"medgym://medcalcbench/test/{r['extra_info']['task_id']}" for r in table)
    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 1 << 20, "return_raw_chat": True,
                            "filter_overlong_prompts": False, "cache_dir": str(tmp_path / "cache")})
    return RLHFDataset(data_files=[str(path)], tokenizer=_tokenizer(), config=cfg)


def test_verl_interaction_plays_exported_rows(medgym_server, fake_model, tmp_path):
    asyncio.run(_plays_exported_rows(medgym_server, fake_model, tmp_path))


async def _plays_exported_rows(medgym_server, fake_model, tmp_path):
    url, store = medgym_server
    ds = _dataset(tmp_path)
    assert len(ds) == 2
    cfg = tmp_path / "interaction.yaml"
    cfg.write_text(f"interaction:\n  - name: medgym\n    class_name: medgym.verl.MedGymInteraction\n"
                   f"    config: {{base_url: \"{url}\", options: {{max_turns: 5}}}}\n")
    interaction = initialize_interactions_from_config(str(cfg))["medgym"]
    for i in range(len(ds)):
        item = ds[i]
        kwargs = item["interaction_kwargs"]  # verl's loop: kwargs["extra_info"]["interaction_kwargs"]
        assert kwargs["name"] == "medgym"
        request_id = f"req-{i}"
        await interaction.start_interaction(request_id, **kwargs)
        sess = interaction.sessions[request_id]
        messages = list(item["raw_prompt"])
        assert messages == sess.messages, "the session's prompt differs from the exported one"
        scores, done = [], False
        while not done:
            messages.append({"role": "assistant", "content": model_reply(fake_model, messages)})
            done, text, score, meta = await interaction.generate_response(request_id, messages, **kwargs)
            no_gold(meta)
            scores.append(score)
            messages.append({"role": "user", "content": text})
        assert meta["outcome"] == "correct" and scores[-1] == 1.0
        assert await interaction.calculate_score(request_id) == 1.0
        # verl's reward function, loaded by verl's own loader as the README's command names it, reads the stored
        # reward through the session the turn scores name (what verl passes it in extra_info), never a gold answer
        extra = {**item.get("extra_info", {}), "interaction_kwargs": kwargs, "turn_scores": scores}
        assert reward_fn(url)(data_source="medgym/medcalcbench", solution_str="", ground_truth=f"medgym://medcalcbench/test/{kwargs['task_id']}",
                              extra_info=extra) == 1.0
        run_id, episode_id = sess.created["run_id"], sess.created["episode_id"]
        await interaction.finalize_interaction(request_id)
        stored = [r for r in wait_rows(store, run_id, 1) if r["episode_id"] == episode_id]
        assert len(stored) == 1 and stored[0]["task_id"] == kwargs["task_id"] and stored[0]["reward"] == 1.0


def reward_fn(url):
    """medgym.verl.compute_score as verl 0.7.1's trainer loads it (reward.custom_reward_function)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = OmegaConf.create({"reward": {"custom_reward_function": {"path": "pkg://medgym.verl", "name": "compute_score",
                                                                  "reward_kwargs": {"base_url": url}}}})
    return get_custom_reward_fn(cfg)


def test_verl_cut_rollout_is_scored_by_the_reward_function(medgym_server):
    asyncio.run(_cut_rollout_is_scored(medgym_server))


async def _cut_rollout_is_scored(medgym_server):
    # verl 0.7.1's loop cuts a rollout (max_assistant_turns, response length) without calling the interaction again
    # or finalize_interaction; the reward function is the rollout's end: it ends the session as a scored episode
    # (turn_limit, reward 0, stored), so it is not reaped as abandoned and left out of the group.
    url, store = medgym_server
    from medgym.verl import MedGymInteraction

    interaction = MedGymInteraction({"name": "medgym", "base_url": url})
    kwargs = {"name": "medgym", "task_id": "medcalcbench-2"}
    rid = await interaction.start_interaction(None, **kwargs)
    done, _, score, _ = await interaction.generate_response(rid, [{"role": "assistant", "content": "no action here"}])
    assert not done and score == 0 and score.session_id == interaction.sessions[rid].id
    sess = interaction.sessions[rid]
    extra = {"interaction_kwargs": kwargs, "turn_scores": [score]}
    assert reward_fn(url)(data_source="medgym/medcalcbench", solution_str="no action here",
                          ground_truth="medgym://medcalcbench/test/medcalcbench-2", extra_info=extra) == 0.0
    stored = [r for r in wait_rows(store, sess.created["run_id"], 1) if r["episode_id"] == sess.created["episode_id"]]
    assert len(stored) == 1 and stored[0]["outcome"] == "turn_limit" and stored[0]["termination"] == "closed"


def test_verl_finalize_stores_an_unfinished_episode(medgym_server):
    asyncio.run(_finalize_stores_an_unfinished_episode(medgym_server))


async def _finalize_stores_an_unfinished_episode(medgym_server):
    url, store = medgym_server
    from medgym.verl import MedGymInteraction

    interaction = MedGymInteraction({"name": "medgym", "base_url": url})
    rid = await interaction.start_interaction(None, name="medgym", task_id="medcalcbench-2")
    done, text, score, _ = await interaction.generate_response(rid, [{"role": "assistant", "content": "no action here"}])
    assert not done and score == 0 and text
    sess = interaction.sessions[rid]
    await interaction.finalize_interaction(rid)
    assert sess.closed is not None and sess.closed["reward"] == 0
    stored = [r for r in wait_rows(store, sess.created["run_id"], 1) if r["episode_id"] == sess.created["episode_id"]]
    assert len(stored) == 1
    with pytest.raises(ValueError, match="unknown interaction"):
        await interaction.generate_response(rid, [{"role": "assistant", "content": "x"}])


def test_verl_agent_loop_stores_token_ids(medgym_server, fake_model, tmp_path):
    asyncio.run(_agent_loop_stores_token_ids(medgym_server, fake_model, tmp_path))


async def _agent_loop_stores_token_ids(medgym_server, fake_model, tmp_path):
    # verl's own ToolAgentLoop (as MedGymAgentLoop) over the exported rows, with the interaction from the config and a
    # generation server standing in for vLLM's (ids in, ids out: the EOS kept in the completion's ids, a logprob per
    # id): every stored turn holds the ids verl generated from and generated, which re-tokenise to the stored reply.
    framework("verl", "verl.experimental.agent_loop.tool_agent_loop")
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.workers.rollout.replica import TokenOutput

    from medgym.verl_agent import MedGymAgentLoop

    url, store = medgym_server
    tok = chatml_tokenizer()
    generated = []  # (prompt ids, completion ids, logprobs) in order

    class Server:
        """verl's AsyncLLMServerManager.generate, answered by the reference test model."""

        async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None):
            reply = hesitant_reply(fake_model, tok.decode(prompt_ids))
            ids = tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            lps = [-0.25 * (k % 4) for k in range(len(ids))]
            generated.append((list(prompt_ids), ids, lps))
            return TokenOutput(token_ids=ids, log_probs=lps)

    cfg = tmp_path / "interaction.yaml"
    cfg.write_text(f"interaction:\n  - name: medgym\n    class_name: medgym.verl.MedGymInteraction\n"
                   f"    config: {{base_url: \"{url}\", options: {{max_turns: 5}}}}\n")
    multi_turn = {"max_user_turns": 8, "max_assistant_turns": 8, "max_parallel_calls": 1, "max_tool_response_length": 256,
                  "tool_response_truncate_side": "middle", "tool_config_path": None, "format": "hermes",
                  "interaction_config_path": str(cfg)}
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 1 << 20, "response_length": 1 << 20,
                                                                 "multi_turn": multi_turn}, "model": {}}})
    ds = _dataset(tmp_path)
    loop = MedGymAgentLoop(DictConfigWrap(config), Server(), tok, None, type(ds), DictConfigWrap(OmegaConf.create({})))
    interaction = loop.interaction_map["medgym"]
    for i in range(len(ds)):
        item = ds[i]
        generated.clear()
        out = await loop.run({"temperature": 1.0}, raw_prompt=item["raw_prompt"],
                             extra_info={"interaction_kwargs": item["interaction_kwargs"]})
        assert out.extra_fields["turn_scores"][-1] == 1.0 and len(generated) == 2
        (rid, sess), = [(k, v) for k, v in interaction.sessions.items() if v.done]
        await interaction.finalize_interaction(rid)
        assert not interaction.tokens, "token data left over"
        stored = [r for r in wait_rows(store, sess.created["run_id"], 1) if r["episode_id"] == sess.created["episode_id"]]
        assert len(stored) == 1 and stored[0]["reward"] == 1.0
        turns = stored[0]["turns"]
        replies = [m["content"] for m in stored[0]["messages"] if m["role"] == "assistant"]
        assert len(turns) == len(generated) == len(replies)
        for t, (prompt, ids, lps), reply in zip(turns, generated, replies):
            assert t["prompt_token_ids"] == prompt and t["completion_token_ids"] == ids and t["completion_logprobs"] == lps
            assert tok.decode(t["completion_token_ids"], skip_special_tokens=True) == t["raw_text"] == reply
        # verl's output: the response's generated tokens (mask 1) are the stored completions, in order.
        mine = [tid for tid, m in zip(out.response_ids, out.response_mask) if m == 1]
        assert mine == [x for t in turns for x in t["completion_token_ids"]]
        # (the transcript verl trains on starts with the last turn's; verl appends the final feedback after it)
        last = turns[-1]["prompt_token_ids"] + turns[-1]["completion_token_ids"]
        assert (list(out.prompt_ids) + list(out.response_ids))[: len(last)] == last
