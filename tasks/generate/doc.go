// Package generate builds medgym's generated task library from the shared
// public data (`medgym tasks generate`, `make library`): the EHRSQL task
// sets over SQLite databases it builds (MIMIC-III, eICU, EHRSQL 2024),
// TREQS, the biostatistics and power-analysis tasks (computed with gonum
// through tasks/stats) and the clinical ML tasks. Each generator is
// deterministic: same inputs and seed, byte-identical output. It is the
// only user of SQLite and gonum; package tasks, which the services import,
// reads what it writes with the standard library alone (loaders, views,
// truths), so the service binaries do not link the generators
// (archtest's generator rule).
package generate
