// Package systemtest holds medgym's system tests: tests that compose the
// services (in-process through their exported Configs and the CLI's package
// cli, or as the built binaries) over a real JetStream server, the real
// sandbox, real data and a trajectory store: end to end runs, chaos and
// outages, the cluster, the dashboard, deployment files, benchmarks, every
// reference solution, and the trainer's runs against a whole pipeline. Like
// nats-server's test/ directory, it is a module of its own, so no service
// module and not the CLI's module require what only these tests need.
package systemtest
