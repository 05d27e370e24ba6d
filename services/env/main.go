// Command env-server is medgym's environment API: HTTP/JSON sessions over
// the same bus, sandbox-worker and verifier a run uses, for RL frameworks
// that run their own rollout loop. See README.md.
package main

import "github.com/medgym/medgym/services/env/env"

func main() { env.Binary.Main() }
