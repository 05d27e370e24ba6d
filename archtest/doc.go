// Package archtest holds medgym's architecture rules as a test over
// `go list -deps -test` of every module in go.work:
//
//   - no package outside bus (the github.com/medgym/medgym/bus tree)
//     imports github.com/nats-io/...: transport stays in bus;
//   - no service imports another service (services/X never imports
//     services/Y): services meet only on the bus, through schemas;
//   - schemas, the wire contract, imports the standard library only;
//   - the trainer's module does not require another service's module;
//   - no package of a service, nor its tests, depends on the task
//     generators (tasks/generate, tasks/stats, SQLite, gonum), directly or
//     through another package: the services load tasks through package
//     tasks, which is the standard library and schemas only;
//   - every relative link of the project's Markdown (README, docs/, the
//     services' READMEs) points at a file, directory or heading that
//     exists (CheckLinks).
//
// Each rule is checked against planted violations in testdata (a positive
// control), so the test is known to be able to fail. Exceptions are listed
// in KnownViolations, exactly: the test fails on a new violation and on a
// listed one that is gone (so the list only shrinks).
package archtest
