package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/acme/billing/internal/config"
)

// The kustomizations under test. The overlay includes the base; a name
// with "+" is the base with those components (see renderNow), and
// overlayHPA is the example overlay with its KEDA component swapped for the
// HPA one, as its comment tells a user to do.
const (
	baseDir    = "base"
	overlayDir = "overlays/example"
	overlayHPA = overlayDir + ":hpa"
	// overlayBoth adds the HPA beside KEDA: it must not render.
	overlayBoth = overlayDir + ":hpa+keda"
	// overlayTracing has the overlay's commented tracing lines switched on.
	overlayTracing = overlayDir + ":tracing"
	obsDir         = "observability"
	strimziDir     = "strimzi"
)

// Components, under components/.
const (
	compMonitoring = "monitoring"
	compHPA        = "hpa"
	compKEDA       = "keda"
	compTracing    = "tracing"
)

// allComponents are the components under components/, in the order a
// rendered kustomization lists them.
var allComponents = []string{compMonitoring, compHPA, compKEDA, compTracing}

// kustomizations are what forEachKustomization renders: the base with every
// combination of components that go together (all but HPA with KEDA), the
// example overlay, and the overlay with the HPA instead of KEDA.
var kustomizations = append(combinations(func(c map[string]bool) bool { return !c[compHPA] || !c[compKEDA] }), overlayDir, overlayHPA, overlayTracing)

// combinations returns "base" plus every subset of allComponents that keep
// accepts, as renderNow's names.
func combinations(keep func(map[string]bool) bool) []string {
	var out []string
	for mask := range 1 << len(allComponents) {
		name, set := baseDir, map[string]bool{}
		for i, c := range allComponents {
			if mask&(1<<i) != 0 {
				name += "+" + c
				set[c] = true
			}
		}
		if keep(set) {
			out = append(out, name)
		}
	}
	return out
}

// isOverlay reports whether dir is the example overlay or a variant of it.
func isOverlay(dir string) bool { return dir == overlayDir || strings.HasPrefix(dir, overlayDir+":") }

// components returns the components a kustomization includes (the
// overlay's as its kustomization.yaml lists them).
func components(dir string) map[string]bool {
	out := map[string]bool{}
	if isOverlay(dir) {
		var k struct {
			Components []string `json:"components"`
		}
		b, err := os.ReadFile(overlayDir + "/kustomization.yaml")
		if err != nil {
			panic(err)
		}
		if err := yaml.Unmarshal(overlayVariant(dir, b), &k); err != nil {
			panic(err)
		}
		for _, c := range k.Components {
			out[path.Base(c)] = true
		}
		return out
	}
	for _, c := range strings.Split(dir, "+")[1:] {
		out[c] = true
	}
	return out
}

// overlayVariant returns the example overlay's kustomization.yaml as the
// variant dir has it.
func overlayVariant(dir string, kustomization []byte) []byte {
	keda := []byte("- ../../components/keda\n")
	switch dir {
	case overlayHPA:
		return bytes.Replace(kustomization, keda, []byte("- ../../components/hpa\n"), 1)
	case overlayBoth:
		return bytes.Replace(kustomization, keda, append(slices.Clone(keda), "  - ../../components/hpa\n"...), 1)
	case overlayTracing:
		on := bytes.Replace(kustomization, []byte("# - ../../components/tracing\n"), []byte("- ../../components/tracing\n"), 1)
		return bytes.ReplaceAll(on, []byte("# - OTEL_"), []byte("- OTEL_"))
	}
	return kustomization
}

// Names every test expects in the rendered output.
const (
	appName      = "billing"
	configMap    = "billing-config"
	secretName   = "billing-secrets"
	dashboardCM  = "billing-dashboard"
	autoscalerCM = "billing-autoscaler"
	partitionsAn = "billing.acme.io/topic-partitions"
	nonrootUID   = int64(65532)
)

// goRuntimeEnv lists environment variables the manifests may set that are not
// billing configuration but read by the Go runtime itself.
var goRuntimeEnv = map[string]bool{"GOMEMLIMIT": true, "GOGC": true}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor that
// the manifests use; decoding is strict, so a field outside it fails.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		JobLabel  string `json:"jobLabel,omitempty"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			Relabelings   []struct {
				SourceLabels []string `json:"sourceLabels,omitempty"`
				Regex        string   `json:"regex,omitempty"`
				Action       string   `json:"action,omitempty"`
			} `json:"relabelings,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule is monitoring.coreos.com/v1 PrometheusRule.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// newObject returns a pointer to the Go type of apiVersion/kind, or nil for a
// kind the tests do not know (which is itself a failure: add it here).
func newObject(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "batch/v1 Job":
		return &batchv1.Job{}
	case "batch/v1 CronJob":
		return &batchv1.CronJob{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Service":
		return &corev1.Service{}
	case "v1 Namespace":
		return &corev1.Namespace{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &serviceMonitor{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &prometheusRule{}
	case "keda.sh/v1alpha1 ScaledObject":
		return &scaledObject{}
	case "keda.sh/v1alpha1 TriggerAuthentication":
		return &triggerAuthentication{}
	case "kafka.strimzi.io/v1beta2 KafkaTopic":
		return &kafkaTopic{}
	case "kafka.strimzi.io/v1beta2 KafkaUser":
		return &kafkaUser{}
	case "rbac.authorization.k8s.io/v1 Role":
		return &rbacv1.Role{}
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		return &rbacv1.RoleBinding{}
	}
	return nil
}

// decodeStrict decodes one YAML object into its API type, refusing unknown
// and duplicate fields.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("read apiVersion/kind: %w", err)
	}
	obj := newObject(tm.APIVersion, tm.Kind)
	if obj == nil {
		return nil, fmt.Errorf("no Go type for %s %s", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// rendered is one kustomization's output, decoded.
type rendered struct {
	objects map[string]any // "Kind/name"
	yaml    map[string][]byte
}

var renders sync.Map // dir -> func() (*rendered, error)

// render runs kustomize in-process on dir (relative to deploy/) once per test
// binary and decodes every resource strictly.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	f, _ := renders.LoadOrStore(dir, sync.OnceValues(func() (*rendered, error) { return renderNow(dir) }))
	r, err := f.(func() (*rendered, error))()
	if err != nil {
		t.Fatalf("render %s: %v", dir, err)
	}
	return r
}

func renderNow(dir string) (*rendered, error) {
	if isOverlay(dir) && dir != overlayDir {
		// A copy of the overlay beside it, its kustomization edited.
		tmp, err := os.MkdirTemp("overlays", ".render-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		entries, err := os.ReadDir(overlayDir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			b, err := os.ReadFile(overlayDir + "/" + e.Name())
			if err != nil {
				return nil, err
			}
			if e.Name() == "kustomization.yaml" {
				if v := overlayVariant(dir, b); !bytes.Equal(v, b) {
					b = v
				} else {
					return nil, fmt.Errorf("%s: the overlay has not the lines this variant edits", dir)
				}
			}
			if err := os.WriteFile(tmp+"/"+e.Name(), b, 0o644); err != nil {
				return nil, err
			}
		}
		dir = tmp
	}
	if parts := strings.Split(dir, "+"); len(parts) > 1 {
		// The base plus components: a kustomization written for the run,
		// beside the real ones (kustomize takes relative paths only).
		tmp, err := os.MkdirTemp(".", ".render-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../" + parts[0] + "\ncomponents:\n"
		for _, c := range parts[1:] {
			k += "  - ../components/" + c + "\n"
		}
		if err := os.WriteFile(tmp+"/kustomization.yaml", []byte(k), 0o644); err != nil {
			return nil, err
		}
		dir = tmp
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	out := &rendered{objects: map[string]any{}, yaml: map[string][]byte{}}
	for _, res := range rm.Resources() {
		doc, err := res.AsYAML()
		if err != nil {
			return nil, err
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", res.GetKind(), res.GetName(), err)
		}
		key := res.GetKind() + "/" + res.GetName()
		if _, dup := out.objects[key]; dup {
			return nil, fmt.Errorf("%s twice", key)
		}
		out.objects[key] = obj
		out.yaml[key] = doc
	}
	return out, nil
}

// get returns the object kind/name of r as a *T, failing the test when it is
// missing.
func get[T any](t *testing.T, r *rendered, kind, name string) *T {
	t.Helper()
	o, ok := r.objects[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s/%s in output; have %v", kind, name, keys(r.objects))
	}
	v, ok := o.(*T)
	if !ok {
		t.Fatalf("%s/%s decoded as %T", kind, name, o)
	}
	return v
}

// configMapNamed finds the generated ConfigMap whose name starts with base
// (kustomize appends a content hash).
func configMapNamed(t *testing.T, r *rendered, base string) *corev1.ConfigMap {
	t.Helper()
	var found []*corev1.ConfigMap
	for _, o := range r.objects {
		if cm, ok := o.(*corev1.ConfigMap); ok && (cm.Name == base || strings.HasPrefix(cm.Name, base+"-")) {
			found = append(found, cm)
		}
	}
	if len(found) != 1 {
		t.Fatalf("ConfigMaps named %s(-hash): got %d, want 1", base, len(found))
	}
	return found[0]
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// configVar returns the variable called env.
func configVar(t *testing.T, env string) config.Var {
	t.Helper()
	v, ok := config.Lookup(env)
	if !ok {
		t.Fatalf("config has no variable %s", env)
	}
	return v
}

// effective returns the value the process would see for env: the ConfigMap's
// when it sets it, otherwise the struct tag default.
func effective(t *testing.T, cm *corev1.ConfigMap, env string) string {
	t.Helper()
	if v, ok := cm.Data[env]; ok {
		return v
	}
	return configVar(t, env).Default
}

func httpPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("BILLING_HTTP_ADDR %q: %v", addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatalf("BILLING_HTTP_ADDR %q: port: %v", addr, err)
	}
	return int32(n)
}

func forEachKustomization(t *testing.T, f func(t *testing.T, dir string, r *rendered)) {
	t.Helper()
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			f(t, dir, render(t, dir))
		})
	}
}

func TestDecodeStrictRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"typo in a Deployment":     "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 3}\n",
		"typo in a ServiceMonitor": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {endpoints: [{port: http, pth: /metrics}]}\n",
		"duplicate key":            "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n",
		"unknown kind":             "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
	} {
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decodeStrict: got nil error, want one", name)
		}
	}
	if _, err := decodeStrict([]byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: 3}\n")); err != nil {
		t.Errorf("valid Deployment: got %v, want nil", err)
	}
}

func TestRenderedObjects(t *testing.T) {
	t.Parallel()
	// What each piece brings; the base holds plain Kubernetes kinds only,
	// so it applies on a cluster with no CRD installed.
	base := []string{"Deployment/" + appName, "Service/" + appName, "PodDisruptionBudget/" + appName, "NetworkPolicy/" + appName,
		"CronJob/" + reconcileCronJob}
	byComponent := map[string][]string{
		compMonitoring: {"ServiceMonitor/" + appName, "PrometheusRule/" + appName, "ConfigMap/" + dashboardCM},
		compHPA:        {"HorizontalPodAutoscaler/" + appName},
		// Every KEDA object comes with KEDA's component: choosing the HPA
		// leaves none behind (KEDA's CRDs may not be installed).
		compKEDA: {"ScaledObject/" + appName, "TriggerAuthentication/"},
	}
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		comps := components(dir)
		want := map[string]bool{}
		for _, k := range base {
			want[k] = true
		}
		for c, ks := range byComponent {
			for _, k := range ks {
				if comps[c] {
					want[k] = true
				} else if hasPrefix(r, k) {
					t.Errorf("%s rendered without component %s", k, c)
				}
			}
		}
		for k := range want {
			if !hasPrefix(r, k) {
				t.Errorf("missing %s; have %v", k, keys(r.objects))
			}
		}
		// Migrations run in the Deployment's init container. A Job's pod
		// template is immutable, so a Job applied with each release fails
		// the second apply: there is none.
		if hasPrefix(r, "Job/") {
			t.Errorf("a Job is rendered; migrations belong to the init container")
		}
		if comps[compHPA] && comps[compKEDA] {
			t.Errorf("HPA and KEDA together: two autoscalers fight over the count")
		}
		// The autoscaler's marker names the one that owns the count.
		owner := ""
		if o, ok := r.objects["ConfigMap/"+autoscalerCM]; ok {
			owner = o.(*corev1.ConfigMap).Data["owner"]
		}
		for _, c := range []string{compHPA, compKEDA} {
			if comps[c] != (owner == c) {
				t.Errorf("ConfigMap %s owner %q with component %s %v", autoscalerCM, owner, c, comps[c])
			}
		}
		configMapNamed(t, r, configMap)
		for k, o := range r.objects {
			if strings.HasPrefix(k, "Secret/") {
				t.Errorf("%s is rendered: secrets are created out of band, never committed", k)
			}
			meta := reflect.ValueOf(o).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
			switch {
			case k == "Namespace/billing":
			case !isOverlay(dir) && meta.Namespace != "":
				t.Errorf("%s: namespace %q in the base, want none (overlays set it)", k, meta.Namespace)
			case isOverlay(dir) && meta.Namespace != "billing":
				t.Errorf("%s: namespace %q, want billing", k, meta.Namespace)
			}
		}
	})
}

// TestAutoscalersExclusive: KEDA's and the HPA's components together do not
// render, whatever else is chosen, and the error names the guard.
func TestAutoscalersExclusive(t *testing.T) {
	t.Parallel()
	both := append(combinations(func(c map[string]bool) bool { return c[compHPA] && c[compKEDA] }), overlayBoth)
	if len(both) != 1<<(len(allComponents)-2)+1 {
		t.Fatalf("combinations with both autoscalers: %v", both)
	}
	for _, dir := range both {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			_, err := renderNow(dir)
			if err == nil || !strings.Contains(err.Error(), "already registered id") || !strings.Contains(err.Error(), autoscalerCM) {
				t.Errorf("render %s: %v, want kustomize to refuse the second %s", dir, err, autoscalerCM)
			}
		})
	}
}

// hasPrefix reports whether r holds an object whose "Kind/name" key starts
// with k (or is k).
func hasPrefix(r *rendered, k string) bool {
	for key := range r.objects {
		if strings.HasPrefix(key, k) {
			return true
		}
	}
	return false
}

func TestDeploymentContract(t *testing.T) {
	t.Parallel()
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		wantImage := "billing:1.0.0"
		if isOverlay(dir) {
			wantImage = "registry.example.com/acme/billing:1.0.0"
		}
		d := get[appsv1.Deployment](t, r, "Deployment", appName)
		cm := configMapNamed(t, r, configMap)
		spec := d.Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Fatalf("containers: got %d, want 1", len(spec.Containers))
		}
		c := spec.Containers[0]
		if got := c.Image; got != wantImage {
			t.Errorf("image: got %q, want %q (a release tag, never latest)", got, wantImage)
		}
		if got, want := c.Args, []string{"run"}; !slices.Equal(got, want) {
			t.Errorf("args: got %q, want %q", got, want)
		}
		// The autoscaler owns the count: a replicas field would be reset
		// by every apply, each time a group rebalance.
		if d.Spec.Replicas != nil {
			t.Errorf("replicas: got %d, want unset", *d.Spec.Replicas)
		}
		// Migrations run in an init container of every pod, before the
		// service, with the service's own image and configuration.
		if len(spec.InitContainers) != 1 {
			t.Fatalf("initContainers: got %d, want 1 (migrate)", len(spec.InitContainers))
		}
		// It waits for an unreachable Postgres (bounded) rather than
		// crash-looping: a pod restarted during an outage starts the moment
		// Postgres answers.
		ic := spec.InitContainers[0]
		if len(ic.Args) != 2 || ic.Args[0] != "migrate" || !strings.HasPrefix(ic.Args[1], "--wait=") || ic.Image != c.Image {
			t.Errorf("init container: %s %q, want %s [migrate --wait=…]", ic.Image, ic.Args, c.Image)
		} else if d, err := time.ParseDuration(strings.TrimPrefix(ic.Args[1], "--wait=")); err != nil || d <= 0 {
			t.Errorf("init container: %s: want a positive duration (%v)", ic.Args[1], err)
		}
		if !reflect.DeepEqual(ic.EnvFrom, c.EnvFrom) {
			t.Errorf("init container envFrom %+v differs from the service's %+v", ic.EnvFrom, c.EnvFrom)
		}
		// A rollout adds a pod before it removes one (maxSurge 1,
		// maxUnavailable 0): a new pod whose init container fails (a
		// migration refused) costs no working pod, and a new pod of a
		// release that does not run beside the old one waits, ready, with
		// billing_consumption_paused{by="release"} while the old pods keep
		// the partitions (deploy/README.md, "Rollouts").
		if st := d.Spec.Strategy; st.Type != appsv1.RollingUpdateDeploymentStrategyType || st.RollingUpdate == nil ||
			deref(st.RollingUpdate.MaxSurge) != intstr.FromInt32(1) || deref(st.RollingUpdate.MaxUnavailable) != intstr.FromInt32(0) {
			t.Errorf("strategy: got %+v, want RollingUpdate with maxSurge 1 and maxUnavailable 0", st)
		}
		if sel, err := metav1.LabelSelectorAsMap(d.Spec.Selector); err != nil || !subset(sel, d.Spec.Template.Labels) {
			t.Errorf("selector %v does not select the pod labels %v (%v)", d.Spec.Selector, d.Spec.Template.Labels, err)
		}

		// The named port is the port BILLING_HTTP_ADDR listens on, by default
		// and as configured.
		defPort := httpPort(t, configVar(t, "BILLING_HTTP_ADDR").Default)
		effPort := httpPort(t, effective(t, cm, "BILLING_HTTP_ADDR"))
		var port *corev1.ContainerPort
		for i := range c.Ports {
			if c.Ports[i].Name == "http" {
				port = &c.Ports[i]
			}
		}
		if port == nil {
			t.Fatalf("no container port named http in %v", c.Ports)
		}
		if port.ContainerPort != defPort || port.ContainerPort != effPort {
			t.Errorf("port http: got %d, want %d (default of BILLING_HTTP_ADDR) and %d (configured)", port.ContainerPort, defPort, effPort)
		}
		for _, p := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{
			{"startupProbe", c.StartupProbe, "/healthz"},
			{"livenessProbe", c.LivenessProbe, "/healthz"},
			{"readinessProbe", c.ReadinessProbe, "/readyz"},
		} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s: got %+v, want an httpGet probe", p.name, p.probe)
				continue
			}
			g := p.probe.HTTPGet
			if g.Path != p.path || g.Port != intstr.FromString("http") {
				t.Errorf("%s: got %s on port %s, want %s on port http", p.name, g.Path, g.Port.String(), p.path)
			}
		}

		// The drain budget fits in the grace period, default and configured,
		// with what the process does after the drain: closing the HTTP
		// server (up to 5 s, internal/app) and flushing the last spans (up to
		// 5 s, cmd/billing's tracingFlushTimeout).
		const afterDrain = 10 * time.Second
		for _, src := range []struct{ what, v string }{
			{"default", configVar(t, "BILLING_SHUTDOWN_TIMEOUT").Default},
			{"configured", effective(t, cm, "BILLING_SHUTDOWN_TIMEOUT")},
		} {
			drain, err := time.ParseDuration(src.v)
			if err != nil {
				t.Fatalf("BILLING_SHUTDOWN_TIMEOUT %s %q: %v", src.what, src.v, err)
			}
			if spec.TerminationGracePeriodSeconds == nil || time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second <= drain+afterDrain {
				t.Errorf("terminationGracePeriodSeconds: got %v, want more than the %s BILLING_SHUTDOWN_TIMEOUT %s and %s after it",
					deref(spec.TerminationGracePeriodSeconds), src.what, drain, afterDrain)
			}
		}
		checkPodSecurity(t, spec)

		req, lim := c.Resources.Requests, c.Resources.Limits
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			rq, okr := req[res]
			lm, okl := lim[res]
			if !okr || !okl || rq.Cmp(lm) > 0 {
				t.Errorf("resources %s: request %v, limit %v; want both, request <= limit", res, rq.String(), lm.String())
			}
		}
		var spread bool
		for _, tsc := range spec.TopologySpreadConstraints {
			spread = spread || tsc.TopologyKey == "kubernetes.io/hostname"
		}
		if !spread {
			t.Errorf("no topologySpreadConstraint on kubernetes.io/hostname")
		}
	})
}

// TestGoMemLimitLeavesHeadroom: GOMEMLIMIT is about 90% of the container's
// memory limit, in every kustomization. Go's limit covers the memory its
// runtime manages; the cgroup also counts the binary's mapped pages and
// kernel memory charged to the container (socket buffers), and a soft limit
// is overshot while the GC catches up, so a limit equal to the container's
// lets the pod reach the kernel's OOM kill before the GC works harder. A
// resourceFieldRef can only give the limit itself
// (a divisor makes a bare number, which Go reads as bytes), so it is a
// literal: an overlay that changes limits.memory changes it too, and this
// test fails until it does.
func TestGoMemLimitLeavesHeadroom(t *testing.T) {
	t.Parallel()
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		c := get[appsv1.Deployment](t, r, "Deployment", appName).Spec.Template.Spec.Containers[0]
		limit, ok := c.Resources.Limits[corev1.ResourceMemory]
		if !ok {
			t.Fatalf("container %s: no limits.memory", c.Name)
		}
		var got []string
		for _, ev := range c.Env {
			if ev.Name != "GOMEMLIMIT" {
				continue
			}
			got = append(got, ev.Value)
			n, err := goMemLimit(ev.Value)
			if err != nil || ev.ValueFrom != nil {
				t.Errorf("GOMEMLIMIT %+v: want a literal Go accepts (%v)", ev, err)
				continue
			}
			if ratio := float64(n) / float64(limit.Value()); ratio < 0.85 || ratio > 0.95 {
				t.Errorf("GOMEMLIMIT %s is %.0f%% of limits.memory %s, want about 90%%", ev.Value, 100*ratio, limit.String())
			}
		}
		if len(got) != 1 {
			t.Errorf("GOMEMLIMIT set %d times (%q), want once", len(got), got)
		}
	})
}

// goMemLimit parses a GOMEMLIMIT value as the Go runtime does: a
// non-negative integer with an optional unit B, KiB, MiB, GiB or TiB.
func goMemLimit(v string) (int64, error) {
	units := []struct {
		suffix string
		mul    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mul := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mul = num, u.mul
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("GOMEMLIMIT %q: not a size Go reads", v)
	}
	return n * mul, nil
}

// checkPodSecurity holds every container of spec to the restricted profile.
func checkPodSecurity(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || !isTrue(psc.RunAsNonRoot) || psc.RunAsUser == nil || *psc.RunAsUser != nonrootUID {
		t.Errorf("pod securityContext: got %+v, want runAsNonRoot and runAsUser %d", psc, nonrootUID)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile: want RuntimeDefault")
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s: no securityContext", c.Name)
			continue
		}
		if sc.RunAsUser != nil && *sc.RunAsUser != nonrootUID {
			t.Errorf("container %s: runAsUser %d, want %d", c.Name, *sc.RunAsUser, nonrootUID)
		}
		if !isTrue(sc.ReadOnlyRootFilesystem) {
			t.Errorf("container %s: readOnlyRootFilesystem: got %v, want true", c.Name, deref(sc.ReadOnlyRootFilesystem))
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s: allowPrivilegeEscalation: got %v, want false", c.Name, deref(sc.AllowPrivilegeEscalation))
		}
		if isTrue(sc.Privileged) {
			t.Errorf("container %s: privileged", c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s: capabilities: got %+v, want drop [ALL], add none", c.Name, sc.Capabilities)
		}
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// deref makes an optional field printable.
func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// podEnv is the environment one container gets: names from env and from the
// ConfigMaps it loads whole, and where each comes from.
type podEnv struct {
	fromConfigMap map[string]string // name -> value
	fromSecret    map[string]corev1.SecretKeySelector
	other         []string // env entries with value or fieldRef
}

func containerEnv(t *testing.T, r *rendered, c corev1.Container) podEnv {
	t.Helper()
	e := podEnv{fromConfigMap: map[string]string{}, fromSecret: map[string]corev1.SecretKeySelector{}}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil || ef.Prefix != "" {
			t.Errorf("container %s: envFrom %+v: want a ConfigMap without prefix", c.Name, ef)
			continue
		}
		cm := get[corev1.ConfigMap](t, r, "ConfigMap", ef.ConfigMapRef.Name)
		for k, v := range cm.Data {
			e.fromConfigMap[k] = v
		}
	}
	for _, ev := range c.Env {
		switch {
		case ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil:
			e.fromSecret[ev.Name] = *ev.ValueFrom.SecretKeyRef
		case ev.ValueFrom != nil && ev.ValueFrom.ConfigMapKeyRef != nil:
			t.Errorf("container %s: %s from a ConfigMap key: use envFrom %s", c.Name, ev.Name, configMap)
		default:
			e.other = append(e.other, ev.Name)
		}
	}
	return e
}

func TestEnvironmentIsKnownConfig(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, n := range config.Names() {
		names[n] = true
	}
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		d := get[appsv1.Deployment](t, r, "Deployment", appName)
		for _, c := range append(slices.Clone(d.Spec.Template.Spec.InitContainers), d.Spec.Template.Spec.Containers...) {
			env := containerEnv(t, r, c)
			all := append(append(keys(env.fromConfigMap), keys(env.fromSecret)...), env.other...)
			for _, n := range all {
				// OTEL_*: read by internal/telemetry and the OpenTelemetry
				// SDK (README.md, Traces).
				if !names[n] && !goRuntimeEnv[n] && !strings.HasPrefix(n, "OTEL_") {
					t.Errorf("container %s: %s is not a billing variable (config.Names), an OpenTelemetry one nor a Go runtime one", c.Name, n)
				}
			}
			for n := range env.fromConfigMap {
				if secretVars[n] || strings.Contains(n, "PASSWORD") {
					t.Errorf("container %s: secret %s in a ConfigMap", c.Name, n)
				}
			}
			// The secrets of the parts its command reads (README.md, "What
			// each command reads"), from billing-secrets, and no other: the
			// init container's migrate gets the database's alone.
			checkCommandEnv(t, c.Name, c.Args, env, func(string) string { return secretName })
			for n := range secretVars {
				if v := configVar(t, n); commandParts(t, c.Args)&v.Part != 0 {
					if _, ok := env.fromSecret[n]; !ok {
						t.Errorf("container %s: %s: want a key of Secret %s", c.Name, n, secretName)
					}
				}
			}
		}
	})
}

func TestBaseConfigMapHoldsDefaults(t *testing.T) {
	t.Parallel()
	cm := configMapNamed(t, render(t, baseDir), configMap)
	for _, v := range config.Vars() {
		n := v.Name
		def, hasDef := v.Default, v.Default != ""
		got, ok := cm.Data[n]
		switch {
		case secretVars[n] && ok:
			t.Errorf("%s: in %s, want it from the Secret %s only", n, configMap, secretName)
		case hasDef && !ok:
			t.Errorf("%s: missing from %s, want its default %q", n, configMap, def)
		case hasDef && got != def:
			t.Errorf("%s: got %q, want the default %q", n, got, def)
		case v.Required && !v.Secret && !ok:
			t.Errorf("%s: required, want a placeholder in %s", n, configMap)
		case !hasDef && ok && got == "":
			// envconfig treats an empty value as set: an int would not parse.
			t.Errorf("%s: empty value, want it left out", n)
		}
	}
}

// secretVars come from the Secret billing-secrets: passwords, and URLs that
// carry them (the DSN, the gateway URL's user info).
var secretVars = map[string]bool{"BILLING_DATABASE_URL": true, "BILLING_KAFKA_SASL_PASSWORD": true, "BILLING_PAYMENT_BASE_URL": true}

// loadConfigEnv makes the test binary, run as a child, call config.Load and
// exit (see TestMain).
const loadConfigEnv = "BILLING_DEPLOY_TEST_LOAD_CONFIG"

func TestMain(m *testing.M) {
	if v := os.Getenv(loadConfigEnv); v != "" {
		// "1": the whole configuration; else the parts, as a number.
		ps, err := strconv.Atoi(v)
		if v == "1" || err != nil {
			ps = int(config.AllParts)
		}
		if _, err := config.LoadParts(config.Part(ps)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// loadConfig runs config.Load in a child process whose whole environment is
// env, and returns its error line.
func loadConfig(t *testing.T, env map[string]string) error {
	t.Helper()
	return loadConfigParts(t, env, config.AllParts)
}

// loadConfigParts is loadConfig of the parts ps only, as a command that
// reads them does.
func loadConfigParts(t *testing.T, env map[string]string, ps config.Part) error {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), exe)
	cmd.Env = []string{loadConfigEnv + "=" + strconv.Itoa(int(ps))}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func TestLoadConfigDetectsBadConfig(t *testing.T) {
	t.Parallel()
	err := loadConfig(t, map[string]string{
		"BILLING_KAFKA_BROKERS": "kafka", "BILLING_DATABASE_URL": "postgres://x",
		"BILLING_PAYMENT_BASE_URL": "http://gw",
	})
	if err == nil || !strings.Contains(err.Error(), "BILLING_KAFKA_BROKERS") {
		t.Errorf("broker without port: got %v, want an error naming BILLING_KAFKA_BROKERS", err)
	}
}

func TestRenderedConfigLoads(t *testing.T) {
	t.Parallel()
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		d := get[appsv1.Deployment](t, r, "Deployment", appName)
		env := containerEnv(t, r, d.Spec.Template.Spec.Containers[0])
		vars := maps.Clone(env.fromConfigMap)
		vars["BILLING_DATABASE_URL"] = "postgres://billing:secret@postgres:5432/billing?sslmode=verify-full"
		vars["BILLING_PAYMENT_BASE_URL"] = "https://user:secret@api.payments.example.com/v1"
		if f := vars["BILLING_KAFKA_TLS_CA_FILE"]; f != "" {
			// Mounted in the pod (TestKafkaCAMounted); a real PEM here.
			vars["BILLING_KAFKA_TLS_CA_FILE"] = testCAFile(t)
		}
		if err := loadConfig(t, vars); err != nil {
			t.Errorf("config.Load with the ConfigMap and a database URL: %v", err)
		}
	})
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestScrapingAndDisruption(t *testing.T) {
	t.Parallel()
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		d := get[appsv1.Deployment](t, r, "Deployment", appName)
		pods := d.Spec.Template.Labels
		svc := get[corev1.Service](t, r, "Service", appName)
		if !subset(svc.Spec.Selector, pods) {
			t.Errorf("Service selector %v does not select the Deployment's pods %v", svc.Spec.Selector, pods)
		}

		if !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("Service publishNotReadyAddresses: got false, want true (a paused pod must still be scraped)")
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort != intstr.FromString("http") {
			t.Errorf("Service ports: got %+v, want http 8080 -> http", svc.Spec.Ports)
		}

		if components(dir)[compMonitoring] {
			sm := get[serviceMonitor](t, r, "ServiceMonitor", appName)
			if sel, err := metav1.LabelSelectorAsMap(&sm.Spec.Selector); err != nil || !subset(sel, svc.Labels) {
				t.Errorf("ServiceMonitor selector %v does not select Service labels %v", sm.Spec.Selector, svc.Labels)
			}
			if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoints: got %+v, want port http path /metrics", sm.Spec.Endpoints)
			}
			// A pod waiting in its init container is no target: no
			// BillingTargetDown while Postgres is out and new pods wait.
			dropsPending := false
			for _, e := range sm.Spec.Endpoints {
				for _, rl := range e.Relabelings {
					dropsPending = dropsPending || (rl.Action == "drop" && slices.Equal(rl.SourceLabels, []string{"__meta_kubernetes_pod_phase"}) &&
						rl.Regex == "Pending")
				}
			}
			if !dropsPending {
				t.Errorf("ServiceMonitor endpoints %+v: no relabeling that drops Pending pods (in their init container)", sm.Spec.Endpoints)
			}
		}

		pdb := get[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", appName)
		if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
			t.Errorf("PDB maxUnavailable: got %v, want 1", deref(pdb.Spec.MaxUnavailable))
		}
		if sel, err := metav1.LabelSelectorAsMap(pdb.Spec.Selector); err != nil || !subset(sel, pods) {
			t.Errorf("PDB selector %v does not select the pods %v", pdb.Spec.Selector, pods)
		}

		np := get[networkingv1.NetworkPolicy](t, r, "NetworkPolicy", appName)
		for what, l := range map[string]map[string]string{"Deployment": pods} {
			if sel, err := metav1.LabelSelectorAsMap(&np.Spec.PodSelector); err != nil || !subset(sel, l) {
				t.Errorf("NetworkPolicy podSelector %v does not select the %s's pods %v", np.Spec.PodSelector, what, l)
			}
		}
		checkNetworkPolicy(t, dir, np, configMapNamed(t, r, configMap))
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			t.Errorf("NetworkPolicy policyTypes: got %v, want Ingress and Egress", np.Spec.PolicyTypes)
		}
	})
}

// checkNetworkPolicy: Prometheus may scrape the metrics port from one
// namespace (which the overlay names), and the pods may reach every port
// their configuration names: each broker of BILLING_KAFKA_BROKERS, Postgres
// directly and through PgBouncer, the gateway, DNS, and with the tracing
// component OTLP (and the port of OTEL_EXPORTER_OTLP_ENDPOINT when set);
// each at named destinations only, never a metadata or link-local address
// (egressProblems).
func checkNetworkPolicy(t *testing.T, dir string, np *networkingv1.NetworkPolicy, cm *corev1.ConfigMap) {
	t.Helper()
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || len(np.Spec.Ingress[0].Ports) != 1 {
		t.Fatalf("NetworkPolicy ingress: got %+v, want one rule, one peer, one port", np.Spec.Ingress)
	}
	in := np.Spec.Ingress[0]
	if ns := in.From[0].NamespaceSelector; ns == nil || len(ns.MatchLabels) != 1 || ns.MatchLabels["kubernetes.io/metadata.name"] == "" || in.From[0].PodSelector != nil || in.From[0].IPBlock != nil {
		t.Errorf("NetworkPolicy ingress from: got %+v, want one namespace, by name", in.From[0])
	}
	if p := in.Ports[0].Port; p == nil || *p != intstr.FromInt32(8080) {
		t.Errorf("NetworkPolicy ingress port: got %v, want 8080", deref(p))
	}
	egress := map[string]bool{}
	for _, e := range np.Spec.Egress {
		for _, p := range e.Ports {
			egress[fmt.Sprintf("%s/%s", p.Port.String(), *p.Protocol)] = true
		}
	}
	want := []string{"5432/TCP", "6432/TCP", "443/TCP", "53/UDP", "53/TCP"}
	if egress["80/TCP"] {
		t.Errorf("NetworkPolicy egress %v opens port 80: the gateway is reached over https", keys(egress))
	}
	for _, b := range strings.Split(effective(t, cm, "BILLING_KAFKA_BROKERS"), ",") {
		_, port, err := net.SplitHostPort(strings.TrimSpace(b))
		if err != nil {
			t.Fatalf("BILLING_KAFKA_BROKERS %q: %v", b, err)
		}
		want = append(want, port+"/TCP")
	}
	tracing := components(dir)[compTracing]
	if tracing {
		want = append(want, "4317/TCP", "4318/TCP")
	}
	if ep := cm.Data["OTEL_EXPORTER_OTLP_ENDPOINT"]; ep != "" {
		u, err := url.Parse(ep)
		if err != nil || u.Port() == "" {
			t.Fatalf("OTEL_EXPORTER_OTLP_ENDPOINT %q: want a URL with a port (%v)", ep, err)
		}
		want = append(want, u.Port()+"/TCP")
	}
	for _, w := range want {
		if !egress[w] {
			t.Errorf("NetworkPolicy egress: no %s in %v", w, keys(egress))
		}
	}
	if !tracing && (egress["4317/TCP"] || egress["4318/TCP"]) {
		t.Errorf("NetworkPolicy egress %v opens OTLP without the tracing component", keys(egress))
	}
	for _, p := range egressProblems(np) {
		t.Errorf("NetworkPolicy %s", p)
	}
}

// partitionsOf reads the partition-count annotation of an autoscaler.
func partitionsOf(t *testing.T, meta metav1.ObjectMeta) int32 {
	t.Helper()
	n, err := strconv.Atoi(meta.Annotations[partitionsAn])
	if err != nil || n < 1 {
		t.Fatalf("%s: annotation %s: got %q, want the topic's partition count", meta.Name, partitionsAn, meta.Annotations[partitionsAn])
	}
	return int32(n)
}

func TestAutoscaler(t *testing.T) {
	t.Parallel()
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		if !components(dir)[compHPA] {
			return
		}
		h := get[autoscalingv2.HorizontalPodAutoscaler](t, r, "HorizontalPodAutoscaler", appName)
		d := get[appsv1.Deployment](t, r, "Deployment", appName)
		cm := configMapNamed(t, r, configMap)
		if ref := h.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
			t.Errorf("scaleTargetRef: got %+v, want apps/v1 Deployment %s", ref, d.Name)
		}
		if partitions := partitionsOf(t, h.ObjectMeta); h.Spec.MaxReplicas > partitions {
			t.Errorf("maxReplicas %d > %d partitions: the extra consumers would sit idle", h.Spec.MaxReplicas, partitions)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != 2 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			t.Errorf("minReplicas: got %v, want 2 (<= maxReplicas %d)", deref(h.Spec.MinReplicas), h.Spec.MaxReplicas)
		}
		if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].External == nil {
			t.Fatalf("metrics: got %+v, want one External metric", h.Spec.Metrics)
		}
		ext := h.Spec.Metrics[0].External
		if ext.Metric.Name != "billing_consumer_lag" || !registeredMetrics(t)[ext.Metric.Name] {
			t.Errorf("external metric: got %q, want billing_consumer_lag (registered by the service)", ext.Metric.Name)
		}
		if ext.Metric.Selector == nil || ext.Metric.Selector.MatchLabels["topic"] != effective(t, cm, "BILLING_KAFKA_TOPIC") {
			t.Errorf("external metric selector: got %v, want topic=%s (BILLING_KAFKA_TOPIC)", ext.Metric.Selector, effective(t, cm, "BILLING_KAFKA_TOPIC"))
		}
		if ext.Target.Type != autoscalingv2.AverageValueMetricType || ext.Target.AverageValue == nil || ext.Target.AverageValue.Sign() <= 0 {
			t.Errorf("external target: got %+v, want a positive AverageValue (lag per pod)", ext.Target)
		}
	})
}

// TestKEDAScaledObject: the Kafka scaler reads the service's own group and
// main topic from the service's brokers, and never asks for more pods than
// partitions.
func TestKEDAScaledObject(t *testing.T) {
	t.Parallel()
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		if !components(dir)[compKEDA] {
			return
		}
		so := get[scaledObject](t, r, "ScaledObject", appName)
		d := get[appsv1.Deployment](t, r, "Deployment", appName)
		cm := configMapNamed(t, r, configMap)
		if ref := so.Spec.ScaleTargetRef; ref.Name != d.Name || (ref.Kind != "" && ref.Kind != "Deployment") {
			t.Errorf("scaleTargetRef: got %+v, want Deployment %s", ref, d.Name)
		}
		partitions := partitionsOf(t, so.ObjectMeta)
		if so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount > partitions {
			t.Errorf("maxReplicaCount %v, want at most %d partitions", deref(so.Spec.MaxReplicaCount), partitions)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
			t.Errorf("minReplicaCount %v, want at least 1 (scaling to zero hides the pods' metrics)", deref(so.Spec.MinReplicaCount))
		}
		if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" {
			t.Fatalf("triggers: got %+v, want one kafka trigger", so.Spec.Triggers)
		}
		tr := so.Spec.Triggers[0]
		for key, env := range map[string]string{
			"bootstrapServers": "BILLING_KAFKA_BROKERS",
			"consumerGroup":    "BILLING_KAFKA_GROUP_ID",
			"topic":            "BILLING_KAFKA_TOPIC",
		} {
			if got, want := tr.Metadata[key], effective(t, cm, env); got != want {
				t.Errorf("trigger %s: got %q, want %q (%s)", key, got, want, env)
			}
		}
		if tr.Metadata["allowIdleConsumers"] != "false" {
			t.Errorf("allowIdleConsumers: got %q, want \"false\"", tr.Metadata["allowIdleConsumers"])
		}
		if n, err := strconv.Atoi(tr.Metadata["lagThreshold"]); err != nil || n <= 0 {
			t.Errorf("lagThreshold: got %q, want a positive lag per pod", tr.Metadata["lagThreshold"])
		}
		tls := effective(t, cm, "BILLING_KAFKA_TLS_ENABLED") == "true"
		if got := tr.Metadata["tls"] == "enable"; got != tls {
			t.Errorf("trigger tls %q, service BILLING_KAFKA_TLS_ENABLED %v", tr.Metadata["tls"], tls)
		}
		if effective(t, cm, "BILLING_KAFKA_SASL_MECHANISM") != "" || tls {
			if tr.AuthenticationRef == nil {
				t.Fatalf("brokers with TLS or SASL, trigger without authenticationRef")
			}
			ta := get[triggerAuthentication](t, r, "TriggerAuthentication", tr.AuthenticationRef.Name)
			params := map[string]bool{}
			for _, s := range ta.Spec.SecretTargetRef {
				params[s.Parameter] = true
			}
			for _, e := range ta.Spec.Env {
				params[e.Parameter] = true
			}
			for _, p := range []string{"username", "password", "ca"} {
				if !params[p] {
					t.Errorf("TriggerAuthentication %s: no %s", ta.Name, p)
				}
			}
		}
	})
}

// TestKafkaCAMounted: a CA file the configuration names is mounted, read
// only, in every container that loads the configuration (the root
// filesystem is read-only, so it cannot be anywhere else).
func TestKafkaCAMounted(t *testing.T) {
	t.Parallel()
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		cm := configMapNamed(t, r, configMap)
		ca := effective(t, cm, "BILLING_KAFKA_TLS_CA_FILE")
		if isOverlay(dir) && (ca == "" || effective(t, cm, "BILLING_KAFKA_TLS_ENABLED") != "true") {
			t.Errorf("example overlay: TLS %q with CA file %q, want TLS on with a mounted CA", effective(t, cm, "BILLING_KAFKA_TLS_ENABLED"), ca)
		}
		if ca == "" {
			return
		}
		d := get[appsv1.Deployment](t, r, "Deployment", appName)
		spec := d.Spec.Template.Spec
		vols := map[string]corev1.Volume{}
		for _, v := range spec.Volumes {
			vols[v.Name] = v
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			var ok bool
			for _, m := range c.VolumeMounts {
				v := vols[m.Name]
				if strings.HasPrefix(ca, strings.TrimSuffix(m.MountPath, "/")+"/") && m.ReadOnly && (v.Secret != nil || v.ConfigMap != nil) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("container %s: %s is on no read-only Secret or ConfigMap mount", c.Name, ca)
			}
		}
	})
}

// testCAFile returns a file for BILLING_KAFKA_TLS_CA_FILE: config.Load only
// checks that it can be read.
func testCAFile(t *testing.T) string {
	t.Helper()
	f := t.TempDir() + "/ca.crt"
	if err := os.WriteFile(f, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestDashboardConfigMap(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile(obsDir + "/billing-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		if !components(dir)[compMonitoring] {
			return
		}
		cm := get[corev1.ConfigMap](t, r, "ConfigMap", dashboardCM)
		if got := cm.Labels["grafana_dashboard"]; got != "1" {
			t.Errorf("label grafana_dashboard: got %q, want \"1\"", got)
		}
		if got := cm.Data["billing-dashboard.json"]; got != string(want) {
			t.Errorf("data billing-dashboard.json differs from %s/billing-dashboard.json", obsDir)
		}
		if !json.Valid([]byte(cm.Data["billing-dashboard.json"])) {
			t.Errorf("dashboard data is not JSON")
		}
	})
}
