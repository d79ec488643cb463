// Package deploy holds billing's deployment files, not code: the kustomize
// base and overlays, the Grafana dashboard and Prometheus rules, and the
// docker-compose file. Its tests render and decode them so that a manifest
// that would not apply, a query that would not parse, or a variable the
// service does not know fails `go test` instead of a rollout.
package deploy
