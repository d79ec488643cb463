package metrics

import "github.com/prometheus/client_golang/prometheus"

// BuildInfo is what billing_build_info says of the running build.
type BuildInfo struct {
	Version    string // the release (CHANGELOG.md), e.g. "1.2.0"
	Revision   string // the VCS revision it was built from
	GoVersion  string
	Schema     string // the highest migration the build knows
	RunsBeside string // the oldest release it runs beside (docs/interface.md §10)
}

// RegisterBuildInfo registers
// billing_build_info{version,revision,goversion,schema,runs_beside}, a
// gauge of 1 that says which release is running where (docs/interface.md §8,
// §10): the dashboard counts pods by its version label.
func RegisterBuildInfo(reg prometheus.Registerer, b BuildInfo) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "billing_build_info",
		Help: "Always 1; the labels say which release and build of billing is running, the schema it needs and the oldest release it runs beside.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion,
			"schema": b.Schema, "runs_beside": b.RunsBeside},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// PaymentCodes are the gateway's usual replies (docs/interface.md §6), created at
// zero in billing_payment_requests_total so that every series exists from
// the first scrape, even in a process that has only seen duplicates.
var PaymentCodes = []string{"200", "201", "400", "401", "402", "403", "404", "409", "422", "429", "500", "502", "503", "504", "error"}
