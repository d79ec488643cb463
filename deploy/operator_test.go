package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// The runbooks' kubectl recipes (deploy/README.md: "Operator commands",
// "Replaying the DLQ", the runbooks) run here against a stand-in kubectl:
// the Jobs they create are checked against the manifests, and each call
// they make against the Role of operator/, which must grant them all and
// nothing more. No cluster is needed.

const operatorDir = "operator"

// readmeSection returns the text of README.md's section headed "### name"
// (or "## name"), up to the next heading of its level or above.
func readmeSection(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range []string{"### ", "## "} {
		_, rest, ok := strings.Cut(string(b), "\n"+level+name+"\n")
		if !ok {
			continue
		}
		end := len(rest)
		for _, h := range []string{"\n## ", "\n" + level} {
			if i := strings.Index(rest, h); i >= 0 && i < end {
				end = i
			}
		}
		return rest[:end]
	}
	t.Fatalf("%s: no section %q", readmeFile, name)
	return ""
}

// shellBlocks returns the bodies of the ```sh blocks of text.
func shellBlocks(text string) []string {
	var out []string
	for _, part := range strings.Split(text, "```sh\n")[1:] {
		body, _, _ := strings.Cut(part, "\n```")
		out = append(out, body)
	}
	return out
}

// kubectlCall is one invocation of the stand-in kubectl.
type kubectlCall []string

// stand is the stand-in kubectl's world: what it answers, what it saw.
type stand struct {
	dir     string
	image   string
	cm      string
	created []string // YAML of each object created (kubectl create -f -)
	calls   []kubectlCall
}

// fakeKubectl is the stand-in: it records its arguments (one line per call,
// separated by the unit separator), answers the Deployment's image and
// ConfigMap name, keeps what `create -f -` reads and names it, prints a log
// for `logs`, and succeeds at everything else.
const fakeKubectl = `#!/bin/bash
(IFS=$'\x1f'; printf '%s\n' "$*") >> "$STAND/calls"
case " $* " in
*" create "*)
	n=$(ls "$STAND" | grep -c '^created-' || true)
	cat > "$STAND/created-$n.yaml"
	echo "job.batch/billing-x$n" ;;
*"containers[0].image"*) echo "$STAND_IMAGE" ;;
*"configMapRef.name"*) echo "$STAND_CM" ;;
*" logs "*) echo '{"level":"INFO","msg":"stand-in log"}' ;;
esac
`

// runWithStand runs script in bash with the stand-in kubectl first on PATH
// and returns what it saw; the Deployment it answers for is the example
// overlay's.
func runWithStand(t *testing.T, script string) *stand {
	t.Helper()
	dep := get[appsv1.Deployment](t, render(t, overlayDir), "Deployment", appName)
	c := dep.Spec.Template.Spec.Containers[0]
	s := &stand{dir: t.TempDir(), image: c.Image, cm: c.EnvFrom[0].ConfigMapRef.Name}
	bin := filepath.Join(s.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(fakeKubectl), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "bash", "-e", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "STAND="+s.dir, "STAND_IMAGE="+s.image, "STAND_CM="+s.cm)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bash: %v\n%s\nscript:\n%s", err, out, script)
	}
	calls, _ := os.ReadFile(filepath.Join(s.dir, "calls"))
	for _, l := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
		if l != "" {
			s.calls = append(s.calls, strings.Split(l, "\x1f"))
		}
	}
	for i := 0; ; i++ {
		b, err := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("created-%d.yaml", i)))
		if err != nil {
			break
		}
		s.created = append(s.created, string(b))
	}
	return s
}

// billingJobDefinition returns the shell function billing_job of README.md's
// "Operator commands".
func billingJobDefinition(t *testing.T) string {
	t.Helper()
	for _, b := range shellBlocks(readmeSection(t, "Operator commands")) {
		if strings.HasPrefix(b, "billing_job() {") {
			return b
		}
	}
	t.Fatalf("%s, Operator commands: no sh block defining billing_job", readmeFile)
	return ""
}

// billingJobOf runs `billing_job args…` (each argument quoted for the
// shell) against the stand-in kubectl and returns the one Job it created.
func billingJobOf(t *testing.T, args []string) (*batchv1.Job, *stand) {
	t.Helper()
	var quoted []string
	for _, a := range args {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	s := runWithStand(t, billingJobDefinition(t)+"\nbilling_job "+strings.Join(quoted, " "))
	if len(s.created) != 1 {
		t.Fatalf("billing_job created %d objects, want one Job", len(s.created))
	}
	obj, err := decodeStrict([]byte(s.created[0]))
	if err != nil {
		t.Fatalf("billing_job's Job: %v\n%s", err, s.created[0])
	}
	j, ok := obj.(*batchv1.Job)
	if !ok {
		t.Fatalf("billing_job created a %T, want a Job", obj)
	}
	return j, s
}

// TestOperatorJob: billing_job runs a billing command as a Job of the
// Deployment's image and ConfigMap that carries the database secret alone
// (docs/interface.md §1: invoice and consume read the database only), its
// arguments exactly as typed (a name or note with quotes and colons
// included), under the restricted pod profile, reaching Postgres through
// the NetworkPolicy while no Service, PDB or autoscaler takes it for a
// consumer.
func TestOperatorJob(t *testing.T) {
	t.Parallel()
	args := []string{"invoice", "resolve", "ord-123", "--charged", "ch_3Nx", "--expect-key", "0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d",
		"--by", "Dana O'Neil", "--note", `gateway's list of 2026-12-05: "ch_3Nx" succeeded`}
	j, s := billingJobOf(t, args)
	spec := j.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("Job: %d containers, %d init containers; want 1, 0", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Args, args) || c.Image != s.image {
		t.Errorf("Job runs %s %q, want %s %q", c.Image, c.Args, s.image, args)
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever || j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0 {
		t.Errorf("Job: restartPolicy %q, backoffLimit %v; want Never and 0 (a decision is not retried behind the person's back)", spec.RestartPolicy, deref(j.Spec.BackoffLimit))
	}
	checkPodSecurity(t, spec)
	if isTrue(spec.AutomountServiceAccountToken) || spec.AutomountServiceAccountToken == nil {
		t.Errorf("Job: automountServiceAccountToken %v, want false (it calls no Kubernetes API)", deref(spec.AutomountServiceAccountToken))
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != s.cm {
		t.Errorf("Job: envFrom %+v, want the Deployment's ConfigMap %s", c.EnvFrom, s.cm)
	}
	// The only secret: the one the Deployment reads BILLING_DATABASE_URL from.
	dep := get[appsv1.Deployment](t, render(t, overlayDir), "Deployment", appName)
	var wantDB *corev1.SecretKeySelector
	for _, ev := range dep.Spec.Template.Spec.Containers[0].Env {
		if ev.Name == "BILLING_DATABASE_URL" && ev.ValueFrom != nil {
			wantDB = ev.ValueFrom.SecretKeyRef
		}
	}
	if wantDB == nil {
		t.Fatal("the Deployment takes BILLING_DATABASE_URL from no Secret")
	}
	if len(c.Env) != 1 || c.Env[0].Name != "BILLING_DATABASE_URL" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.SecretKeyRef == nil ||
		c.Env[0].ValueFrom.SecretKeyRef.Name != wantDB.Name || c.Env[0].ValueFrom.SecretKeyRef.Key != wantDB.Key {
		t.Errorf("Job env %+v, want BILLING_DATABASE_URL from %s/%s and nothing else", c.Env, wantDB.Name, wantDB.Key)
	}
	if len(spec.Volumes) != 0 || len(c.VolumeMounts) != 0 {
		t.Errorf("Job mounts %+v: it needs no file (no Kafka CA: it reaches no broker)", spec.Volumes)
	}

	checkJobPodLabels(t, j, "Postgres")
}

// TestOperatorJobReconcile: billing_job runs `billing reconcile` with the
// secrets of the parts it reads, the database's and the gateway's, the
// ones the Deployment reads them from, and no other.
func TestOperatorJobReconcile(t *testing.T) {
	t.Parallel()
	args := []string{"reconcile", "--day", "2026-12-04", "--resolve-held", "--by", "Dana O'Neil"}
	j, _ := billingJobOf(t, args)
	c := j.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Args, args) {
		t.Errorf("Job runs %q, want %q", c.Args, args)
	}
	r := render(t, overlayDir)
	env := podEnv{fromConfigMap: map[string]string{}, fromSecret: map[string]corev1.SecretKeySelector{}}
	for k, v := range configMapNamed(t, r, configMap).Data {
		env.fromConfigMap[k] = v
	}
	for _, ev := range c.Env {
		if ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil {
			env.fromSecret[ev.Name] = *ev.ValueFrom.SecretKeyRef
		}
	}
	checkCommandEnv(t, "Job "+c.Name, c.Args, env, func(string) string { return secretName })
	dep := get[appsv1.Deployment](t, r, "Deployment", appName).Spec.Template.Spec.Containers[0]
	for _, ev := range dep.Env {
		if got, ok := env.fromSecret[ev.Name]; ok && (ev.ValueFrom == nil || ev.ValueFrom.SecretKeyRef == nil || got.Key != ev.ValueFrom.SecretKeyRef.Key) {
			t.Errorf("Job: %s from key %q, the Deployment's from %+v", ev.Name, got.Key, ev.ValueFrom)
		}
	}
	if got := keys(env.fromSecret); len(got) != 2 {
		t.Errorf("Job secrets %v, want the database's and the gateway's", got)
	}
}

// permission is one RBAC permission: a verb on a resource of an API group,
// for one object (name "" for any).
type permission struct{ verb, group, resource, name string }

// permissionsOf is what kubectl needs from the API server for call; false
// for a call the table does not know (add it, with what it needs).
func permissionsOf(call kubectlCall, created []string) ([]permission, bool) {
	follow := slices.Contains(call, "-f") || slices.Contains(call, "--follow")
	var args []string // the words that are not flags, nor their values
	for i := 0; i < len(call); i++ {
		switch a := call[i]; {
		case a == "-n" || a == "--namespace" || a == "-o" || a == "--output":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			args = append(args, a)
		}
	}
	if len(args) == 0 {
		return nil, false
	}
	switch {
	case len(args) >= 3 && args[0] == "get" && (args[1] == "deploy" || args[1] == "deployment"):
		return []permission{{"get", "apps", "deployments", args[2]}}, true
	case len(args) >= 3 && args[0] == "get" && (args[1] == "cronjob" || args[1] == "cronjobs"):
		return []permission{{"get", "batch", "cronjobs", args[2]}}, true
	case len(args) >= 2 && args[0] == "create" && args[1] == "job" && slices.ContainsFunc(call, func(a string) bool { return strings.HasPrefix(a, "--from=cronjob/") }):
		// kubectl create job --from=cronjob/NAME: the CronJob's Job template
		// read, a Job created from it.
		i := slices.IndexFunc(call, func(a string) bool { return strings.HasPrefix(a, "--from=cronjob/") })
		return []permission{{"get", "batch", "cronjobs", strings.TrimPrefix(call[i], "--from=cronjob/")}, {"create", "batch", "jobs", ""}}, true
	case args[0] == "create" && len(created) > 0:
		// kubectl create -f - of the Jobs above.
		return []permission{{"create", "batch", "jobs", ""}}, true
	case len(args) == 2 && args[0] == "logs" && strings.HasPrefix(args[1], "job.batch/"):
		// The Job, its pods by selector (watched until one runs, when
		// following), the pod's log.
		perms := []permission{{"get", "batch", "jobs", ""}, {"list", "", "pods", ""}, {"get", "", "pods/log", ""}}
		if follow {
			perms = append(perms, permission{"watch", "", "pods", ""})
		}
		return perms, true
	case len(args) == 2 && args[0] == "wait" && strings.HasPrefix(args[1], "job.batch/"):
		return []permission{{"get", "batch", "jobs", ""}, {"list", "batch", "jobs", ""}, {"watch", "batch", "jobs", ""}}, true
	case len(args) == 3 && args[0] == "delete" && args[1] == "pod":
		return []permission{{"delete", "", "pods", ""}}, true
	}
	return nil, false
}

// roleGrants reports whether rule allows p.
func roleGrants(rule rbacv1.PolicyRule, p permission) bool {
	return slices.Contains(rule.APIGroups, p.group) && slices.Contains(rule.Resources, p.resource) && slices.Contains(rule.Verbs, p.verb) &&
		(len(rule.ResourceNames) == 0 || (p.name != "" && slices.Contains(rule.ResourceNames, p.name)))
}

var placeholderRE = regexp.MustCompile(`\b[A-Z][A-Z_]+[A-Z]\b`)

// TestOperatorRoleGrantsTheRecipes: the Role of operator/ grants every call
// of the recipes an on-call person follows (billing_job, the replay Job,
// the runbooks' kubectl lines), and nothing they do not make; its binding
// names it. A person with it needs neither pods/exec nor a Secret.
func TestOperatorRoleGrantsTheRecipes(t *testing.T) {
	t.Parallel()
	r := render(t, operatorDir)
	role := get[rbacv1.Role](t, r, "Role", "billing-operator")
	rb := get[rbacv1.RoleBinding](t, r, "RoleBinding", "billing-operator")
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || len(rb.Subjects) == 0 {
		t.Errorf("RoleBinding %+v: want it to bind Role %s to a subject", rb, role.Name)
	}

	// The replay's Job, not the one-time Secret copy before it (an
	// administrator's, in the Kafka namespace too).
	var replay string
	for _, b := range shellBlocks(readmeSection(t, "Replaying the DLQ")) {
		if strings.Contains(b, "<<EOF") {
			replay = b
		}
	}
	if replay == "" {
		t.Fatalf("%s, Replaying the DLQ: no sh block creating the Job", readmeFile)
	}
	var runbookLines []string
	for _, b := range shellBlocks(readmeSection(t, "Runbooks")) {
		for _, l := range strings.Split(b, "\n") {
			if strings.HasPrefix(l, "kubectl ") {
				// POD and the like are a person's to fill in.
				runbookLines = append(runbookLines, placeholderRE.ReplaceAllStringFunc(l, strings.ToLower))
			}
		}
	}
	if len(runbookLines) == 0 {
		t.Fatalf("%s: no kubectl line in the runbooks' sh blocks", readmeFile)
	}
	recipes := map[string]string{
		"billing_job":       billingJobDefinition(t) + "\nbilling_job invoice list --status held",
		"the replay Job":    replay,
		"runbook kubectl":   strings.Join(runbookLines, "\n"),
		"billing_job again": billingJobDefinition(t) + "\nbilling_job version",
	}
	used := map[permission]bool{}
	for name, script := range recipes {
		s := runWithStand(t, script)
		if len(s.calls) == 0 {
			t.Errorf("%s: no kubectl call", name)
		}
		for _, call := range s.calls {
			perms, ok := permissionsOf(call, s.created)
			if !ok {
				t.Errorf("%s: kubectl %q: no RBAC known for it (add it to permissionsOf)", name, call)
				continue
			}
			for _, p := range perms {
				used[permission{p.verb, p.group, p.resource, ""}] = true
				if !slices.ContainsFunc(role.Rules, func(rule rbacv1.PolicyRule) bool { return roleGrants(rule, p) }) {
					t.Errorf("%s: kubectl %q needs %s on %s %q (group %q): Role %s does not grant it", name, call, p.verb, p.resource, p.name, p.group, role.Name)
				}
			}
		}
	}
	for _, rule := range role.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					if !used[permission{v, g, res, ""}] {
						t.Errorf("Role %s grants %s on %s (group %q), which no recipe uses", role.Name, v, res, g)
					}
				}
			}
		}
	}
}

// TestRunbookKubectlNamesExist: the objects the runbooks and the operator
// recipes name (the namespace, the Deployment, its Secret's key) are the
// ones the example overlay renders.
func TestRunbookKubectlNamesExist(t *testing.T) {
	t.Parallel()
	r := render(t, overlayDir)
	ns := ""
	for k := range r.objects {
		if strings.HasPrefix(k, "Namespace/") {
			ns = strings.TrimPrefix(k, "Namespace/")
		}
	}
	dep := get[appsv1.Deployment](t, r, "Deployment", appName)
	if dep.Namespace != ns {
		t.Fatalf("Deployment in %q, the overlay's Namespace %q", dep.Namespace, ns)
	}
	// The recipes: billing_job, the replay Job, the runbooks' sh blocks.
	text := billingJobDefinition(t)
	for _, b := range append(shellBlocks(readmeSection(t, "Replaying the DLQ")), shellBlocks(readmeSection(t, "Runbooks"))...) {
		if !strings.Contains(b, "-n kafka") { // the administrator's one-time copy of a Secret
			text += "\n" + b
		}
	}
	for _, m := range regexp.MustCompile(`kubectl -n (\S+)`).FindAllStringSubmatch(text, -1) {
		if m[1] != ns {
			t.Errorf("a recipe works in namespace %q; the overlay's is %q", m[1], ns)
		}
	}
	for _, m := range regexp.MustCompile(`get deploy (\S+)`).FindAllStringSubmatch(text, -1) {
		if m[1] != dep.Name {
			t.Errorf("a recipe reads Deployment %q; the overlay's is %q", m[1], dep.Name)
		}
	}
	for _, m := range regexp.MustCompile(`secretKeyRef:\s+name: (\S+)\s+key: (\S+)`).FindAllStringSubmatch(text, -1) {
		found := false
		for _, c := range append(dep.Spec.Template.Spec.Containers, dep.Spec.Template.Spec.InitContainers...) {
			for _, ev := range c.Env {
				if ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil && ev.ValueFrom.SecretKeyRef.Name == m[1] && ev.ValueFrom.SecretKeyRef.Key == m[2] {
					found = true
				}
			}
		}
		if !found && m[1] == secretName {
			t.Errorf("a recipe reads key %s of Secret %s, which the Deployment does not use", m[2], m[1])
		}
	}
}
