module github.com/medgym/medgym/services/llm-worker

go 1.26.8

require (
	github.com/medgym/medgym/bus v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/schemas v0.0.0-00010101000000-000000000000
	github.com/medgym/medgym/tasks v0.0.0-00010101000000-000000000000
	github.com/nats-io/nats.go v1.55.0
)

require (
	github.com/ThreeDotsLabs/watermill v1.5.1 // indirect
	github.com/ThreeDotsLabs/watermill-nats/v2 v2.1.3 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace (
	github.com/medgym/medgym/bus => ../../bus
	github.com/medgym/medgym/schemas => ../../schemas
	github.com/medgym/medgym/tasks => ../../tasks
)
