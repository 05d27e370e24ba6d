// Package tasks is medgym's task library: it loads built-in task sets
// generated from public biomedical data and upstream MedAgentGym task folders,
// and gives each task its agent-visible view, its ground truth and its
// reference solution. It imports the standard library and schemas only, so
// every service can load tasks without linking the generators: those live
// in package generate (tasks/generate: SQLite, gonum), which only the
// operator CLI (`medgym tasks generate`) imports.
//
// The generated library is two trees (docs/adr/0008-agent-and-verifier-trees.md):
// <library>/agent holds what agent code may read (databases, CSVs, notes)
// and is the only tree a sandbox mounts; <library>/verifier holds the task
// files (truth, gold SQL, reference solutions) the loaders read. Each has a
// manifest with a content hash (WriteManifests, LibraryHashes) that every
// trajectory row records. StageUpstream builds the same agent view of an
// upstream task folder.
//
// Ground truth and reference solutions never leave this package on the bus:
// the dispatcher publishes only Task.View; the verifier looks the truth up by
// task id; the llm-worker reads Reference only under the reference policy.
package tasks
