// Package tasks is medgym's task library: it loads built-in task sets
// generated from public biomedical data and upstream MedAgentGym task folders,
// and gives each task its agent-visible view, its ground truth and its
// reference solution.
//
// Ground truth and reference solutions never leave this package on the bus:
// the dispatcher publishes only Task.View; the verifier looks the truth up by
// task id; the llm-worker reads Reference only under the reference policy.
package tasks
