// Package export writes medgym's tasks as the datasets external RL
// frameworks train from, each naming medgym's environment API as the place
// where episodes are played and scored:
//
//   - verl/<dataset>_<split>.parquet: verl's RL dataset (data_source, prompt,
//     ability, reward_model, extra_info), whose
//     extra_info.interaction_kwargs {name: "medgym", task_id, dataset, split}
//     names the task medgym's verl agent loop plays
//     (clients/python/medgym/verl_agent.py);
//   - prompts/<dataset>_<split>.parquet: a prompt-only dataset for TRL's
//     GRPOTrainer and SkyRL (prompt, env_class "medgym", task_id, dataset,
//     split), with a .jsonl twin.
//
// The prompt is the system and user messages exactly as a session for the
// same task and options starts with (agent.BuildMessages through
// agent.EpisodePromptOptions, the llm-worker's and the environment server's
// builder). Only the agent-visible TaskView is read: reward_model.ground_truth
// is a task reference ("medgym://dataset/split/task_id"), never the answer,
// which stays with the verifier (the canary test in export_test.go plants one
// in a task's truth and searches every exported byte for it).
package export
