module github.com/medgym/medgym/agent

go 1.26.8

require (
	github.com/medgym/medgym/schemas v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/tasks v0.0.0-00010101000000-000000000000
)

replace (
	github.com/medgym/medgym/schemas => ../schemas
	github.com/medgym/medgym/tasks => ../tasks
)
