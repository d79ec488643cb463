package deploy

import (
	"maps"
	"os"
	"path"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// readmeReplayJob returns the Job of README.md's "Replaying the DLQ": the
// heredoc the shell would send to kubectl, with its variables set.
func readmeReplayJob(t *testing.T) (*batchv1.Job, string) {
	t.Helper()
	b, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	_, rest, ok := strings.Cut(readme, "\n### Replaying the DLQ\n")
	if !ok {
		t.Fatalf("%s: no section Replaying the DLQ", readmeFile)
	}
	_, rest, ok1 := strings.Cut(rest, "<<EOF\n")
	doc, _, ok2 := strings.Cut(rest, "\nEOF\n")
	if !ok1 || !ok2 {
		t.Fatalf("%s, Replaying the DLQ: no <<EOF heredoc", readmeFile)
	}
	doc = strings.NewReplacer("$IMAGE", "registry.example.com/acme/billing:1.0.0", "$CM", configMap+"-abc123",
		"$ARGS", `"--dry-run"`).Replace(doc)
	obj, err := decodeStrict([]byte(doc))
	if err != nil {
		t.Fatalf("%s, Replaying the DLQ: %v", readmeFile, err)
	}
	j, ok := obj.(*batchv1.Job)
	if !ok {
		t.Fatalf("%s, Replaying the DLQ: a %T, want a Job", readmeFile, obj)
	}
	return j, readme
}

// TestReadmeReplayJob: the Job deploy/README.md gives for `billing dlq
// replay` runs it as the replay KafkaUser with that user's password, with
// the configuration its command reads and no database or gateway secret,
// under the restricted pod
// profile, reaching Kafka through the NetworkPolicy while no Service, PDB
// or autoscaler takes it for a consumer, and with the broker CA where the
// example overlay's configuration looks for it.
func TestReadmeReplayJob(t *testing.T) {
	t.Parallel()
	j, readme := readmeReplayJob(t)
	spec := j.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("Job: %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Args) < 2 || c.Args[0] != "dlq" || c.Args[1] != "replay" || c.Args[len(c.Args)-1] != "--dry-run" {
		t.Errorf("Job args %q, want dlq replay and $ARGS", c.Args)
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever || j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0 {
		t.Errorf("Job: restartPolicy %q, backoffLimit %v; want Never and 0 (a person reruns it)", spec.RestartPolicy, deref(j.Spec.BackoffLimit))
	}
	checkPodSecurity(t, spec)

	user := get[kafkaUser](t, render(t, strimziDir), "KafkaUser", replayUser)
	env := map[string]corev1.EnvVar{}
	for _, ev := range c.Env {
		env[ev.Name] = ev
	}
	if got := env["BILLING_KAFKA_SASL_USERNAME"].Value; got != user.Name {
		t.Errorf("Job: BILLING_KAFKA_SASL_USERNAME %q, want the KafkaUser %s", got, user.Name)
	}
	pw := env["BILLING_KAFKA_SASL_PASSWORD"].ValueFrom
	if pw == nil || pw.SecretKeyRef == nil || pw.SecretKeyRef.Name == secretName || isTrue(pw.SecretKeyRef.Optional) {
		t.Fatalf("Job: BILLING_KAFKA_SASL_PASSWORD %+v, want a Secret of its own (not %s), not optional", pw, secretName)
	}
	// The Secret is made from the one the User Operator writes for the user.
	ref := pw.SecretKeyRef
	if !strings.Contains(readme, "secret generic "+ref.Name+" \\\n  --from-literal="+ref.Key+"=") ||
		!strings.Contains(readme, "get secret "+user.Name+" ") {
		t.Errorf("%s: no command making Secret %s (key %s) from the User Operator's Secret %s", readmeFile, ref.Name, ref.Key, user.Name)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != configMap+"-abc123" {
		t.Errorf("Job: envFrom %+v, want the Deployment's ConfigMap ($CM)", c.EnvFrom)
	}
	// `billing dlq replay` reads Kafka's part alone (README.md, "What each
	// command reads"): the Job carries no database or gateway secret, and
	// its configuration loads with what it carries.
	cm := configMapNamed(t, render(t, overlayDir), configMap)
	jobEnv := podEnv{fromConfigMap: cm.Data, fromSecret: map[string]corev1.SecretKeySelector{}}
	vars := maps.Clone(cm.Data)
	for _, ev := range c.Env {
		switch {
		case ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil:
			jobEnv.fromSecret[ev.Name] = *ev.ValueFrom.SecretKeyRef
			vars[ev.Name] = "replay-user-password"
		default:
			jobEnv.other = append(jobEnv.other, ev.Name)
			vars[ev.Name] = ev.Value
		}
	}
	checkCommandEnv(t, "Job "+c.Name, c.Args, jobEnv, nil)
	if f := vars["BILLING_KAFKA_TLS_CA_FILE"]; f != "" {
		vars["BILLING_KAFKA_TLS_CA_FILE"] = testCAFile(t) // mounted below
	}
	if err := loadConfigParts(t, vars, commandParts(t, c.Args)); err != nil {
		t.Errorf("Job: billing dlq replay's configuration with the Job's environment: %v", err)
	}

	checkJobPodLabels(t, j, "Kafka")

	caFile := effective(t, configMapNamed(t, render(t, overlayDir), configMap), "BILLING_KAFKA_TLS_CA_FILE")
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "kafka-ca" && path.Join(m.MountPath, path.Base(caFile)) == caFile)
	}
	if !mounted {
		t.Errorf("Job: no kafka-ca mount holding %s (the example overlay's BILLING_KAFKA_TLS_CA_FILE)", caFile)
	}
}

// checkJobPodLabels checks that the NetworkPolicy selects j's pods (their
// egress to reach, for the error), and that neither the Service nor the
// PDB takes them for consumers.
func checkJobPodLabels(t *testing.T, j *batchv1.Job, reach string) {
	t.Helper()
	base := render(t, baseDir)
	labels := j.Spec.Template.Labels
	if np := get[networkingv1.NetworkPolicy](t, base, "NetworkPolicy", appName); !subset(np.Spec.PodSelector.MatchLabels, labels) {
		t.Errorf("Job pod labels %v: the NetworkPolicy's podSelector %v does not select them (no egress to %s)", labels, np.Spec.PodSelector.MatchLabels, reach)
	}
	if svc := get[corev1.Service](t, base, "Service", appName); subset(svc.Spec.Selector, labels) {
		t.Errorf("Job pod labels %v: selected by the Service (scraped as a consumer)", labels)
	}
	if pdb := get[policyv1.PodDisruptionBudget](t, base, "PodDisruptionBudget", appName); subset(pdb.Spec.Selector.MatchLabels, labels) {
		t.Errorf("Job pod labels %v: selected by the PDB", labels)
	}
}
