module github.com/medgym/medgym/services/trainer

go 1.26.8

require (
	github.com/medgym/medgym/schemas v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/services/verifier v0.0.0-00010101000000-000000000000
)
