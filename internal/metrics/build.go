package metrics

import "github.com/prometheus/client_golang/prometheus"

// RegisterBuildInfo registers billing_build_info{version,revision,goversion},
// a gauge of 1 that says which build is running (CONTRACT.md §8).
func RegisterBuildInfo(reg prometheus.Registerer, version, revision, goVersion string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "billing_build_info",
		Help:        "Always 1; the labels say which build of billing is running.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// PaymentCodes are the gateway's usual replies (CONTRACT.md §6), created at
// zero in billing_payment_requests_total so that every series exists from
// the first scrape, even in a process that has only seen duplicates.
var PaymentCodes = []string{"200", "201", "400", "401", "402", "403", "404", "409", "422", "429", "500", "502", "503", "504", "error"}
