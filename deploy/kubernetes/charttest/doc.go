// Package charttest renders medgym's Helm chart (deploy/kubernetes/medgym)
// through Helm's Go library with its dependencies (the NATS and MinIO charts)
// disabled, decodes every manifest strictly with the Kubernetes API types
// (k8s.io/api) and the ScaledObjects with KEDA's own Go types, and checks the
// names they use (streams, consumers, metrics) against schemas and a live
// /metrics scrape of the real services. It is its own module so that nothing
// else in medgym links Helm or the Kubernetes libraries.
package charttest
