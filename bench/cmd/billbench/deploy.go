package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// deployment is the manifest whose container settings the service runs with.
const deployment = "deploy/base/deployment.yaml"

// runtimeEnv returns the Go runtime variables of the billing container of
// the Deployment at path: those set to a value (GOMEMLIMIT, a share of
// limits.memory), and those it takes from its own resources (GOMAXPROCS,
// should it come from limits.cpu), resolved as the kubelet resolves a
// resourceFieldRef: the limit divided by the divisor, rounded up. The
// service is measured as it runs in its pod.
func runtimeEnv(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "billing" })
	if i < 0 {
		return nil, fmt.Errorf("%s: no container billing", path)
	}
	c := d.Spec.Template.Spec.Containers[i]
	out := map[string]string{}
	for _, ev := range c.Env {
		if ev.ValueFrom == nil && goRuntimeVars[ev.Name] {
			out[ev.Name] = ev.Value
			continue
		}
		if ev.ValueFrom == nil || ev.ValueFrom.ResourceFieldRef == nil {
			continue
		}
		f := ev.ValueFrom.ResourceFieldRef
		var q resource.Quantity
		switch f.Resource {
		case "limits.cpu":
			q = c.Resources.Limits[corev1.ResourceCPU]
		case "limits.memory":
			q = c.Resources.Limits[corev1.ResourceMemory]
		default:
			return nil, fmt.Errorf("%s: %s from %s: not resolved here", path, ev.Name, f.Resource)
		}
		if q.IsZero() {
			return nil, fmt.Errorf("%s: %s from %s, which is not set", path, ev.Name, f.Resource)
		}
		if !f.Divisor.IsZero() && f.Divisor.Cmp(resource.MustParse("1")) != 0 {
			return nil, fmt.Errorf("%s: %s: divisor %s not resolved here", path, ev.Name, f.Divisor.String())
		}
		out[ev.Name] = strconv.FormatInt(q.Value(), 10) // Value rounds up: 500m → 1
	}
	return out, nil
}

// goRuntimeVars are the variables of the Go runtime a manifest may set.
var goRuntimeVars = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true, "GOGC": true, "GODEBUG": true}

// deploymentPath is the manifest under root.
func deploymentPath(root string) string { return filepath.Join(root, deployment) }
