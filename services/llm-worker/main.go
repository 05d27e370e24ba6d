// Command llm-worker plays episodes: it builds prompts, asks the policy
// (an OpenAI-compatible endpoint or the reference solutions) for actions,
// and folds in observations. See README.md.
package main

import "github.com/medgym/medgym/services/llm-worker/llmworker"

func main() { llmworker.Binary.Main() }
