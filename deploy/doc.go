// Package deploy holds berth's deployment files (Dockerfile build, Compose
// stack, Kubernetes manifests, Grafana dashboard, Prometheus alerts) and
// the tests that check their wiring against the code, since CI has no
// container runtime or cluster to run them in.
package deploy
