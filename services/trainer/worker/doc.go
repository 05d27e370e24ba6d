// Package worker runs the resident trainer (python/worker.py) as a child
// process and talks to it over JSON lines on its stdin and stdout
// (docs/adr/0012-resident-trainer.md): the base model is loaded once per
// online run or training job, the optimiser state lives across steps, and
// a crashed worker is restarted from the last adapter and optimiser state
// it saved. With Supervisor.Serve the worker also serves the model it
// trains over the OpenAI chat wire, at one address across restarts.
package worker
