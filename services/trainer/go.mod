module github.com/medgym/medgym/services/trainer

go 1.26.8

require (
	github.com/medgym/medgym/bus v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/schemas v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/services/dispatcher v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/services/llm-worker v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/services/sandbox-worker v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/services/verifier v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/store v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/tasks v0.0.0-00010101000000-000000000000
)

replace (
	github.com/medgym/medgym/bus => ../../bus
	github.com/medgym/medgym/schemas => ../../schemas
	github.com/medgym/medgym/services/dispatcher => ../dispatcher
	github.com/medgym/medgym/services/llm-worker => ../llm-worker
	github.com/medgym/medgym/services/sandbox-worker => ../sandbox-worker
	github.com/medgym/medgym/services/verifier => ../verifier
	github.com/medgym/medgym/store => ../../store
	github.com/medgym/medgym/tasks => ../../tasks
)
