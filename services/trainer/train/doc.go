// Package train turns stored trajectories (schemas/parquet rows) into
// training data, in pure Go: SFT conversations with a loss mask, rejection
// sampling (best of K per task), DPO pairs (upstream's within-episode recipe
// and cross-episode pairs of one task), YES/NO verifier data, and GRPO
// groups with group-normalised advantages. Write puts them on disk in the
// layouts TRL, LLaMA-Factory and verl read (JSONL and Parquet), with a
// manifest and a data card. Nothing here touches the bus or a model.
package train
