package deploy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// reconcileCronJob is the CronJob of base/reconcile-cronjob.yaml.
const reconcileCronJob = "billing-reconcile"

// TestReconcileCronJob: every kustomization runs `billing reconcile` daily,
// once at a time, from the Deployment's image and ConfigMap, carrying the
// secrets of the parts its command reads (the database's and the
// gateway's) and no other, under the restricted pod profile, with a memory
// limit its GOMEMLIMIT leaves headroom under, reaching Postgres and the
// gateway through the NetworkPolicy while no Service, PDB or autoscaler
// takes it for a consumer. A failed run is not retried behind the alerts'
// back: the next run, or a person, runs it again.
func TestReconcileCronJob(t *testing.T) {
	t.Parallel()
	forEachKustomization(t, func(t *testing.T, dir string, r *rendered) {
		cj := get[batchv1.CronJob](t, r, "CronJob", reconcileCronJob)
		dep := get[appsv1.Deployment](t, r, "Deployment", appName).Spec.Template.Spec.Containers[0]
		if !daily(cj.Spec.Schedule) || cj.Spec.TimeZone == nil || *cj.Spec.TimeZone != "Etc/UTC" {
			t.Errorf("schedule %q in %v, want once a day at a fixed UTC time", cj.Spec.Schedule, deref(cj.Spec.TimeZone))
		}
		if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
			t.Errorf("concurrencyPolicy %q, want Forbid: one run at a time", cj.Spec.ConcurrencyPolicy)
		}
		job := &batchv1.Job{ObjectMeta: cj.Spec.JobTemplate.ObjectMeta, Spec: cj.Spec.JobTemplate.Spec}
		spec := job.Spec.Template.Spec
		if spec.RestartPolicy != corev1.RestartPolicyNever || job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 ||
			job.Spec.ActiveDeadlineSeconds == nil {
			t.Errorf("Job: restartPolicy %q, backoffLimit %v, activeDeadlineSeconds %v; want Never, 0 and a deadline",
				spec.RestartPolicy, deref(job.Spec.BackoffLimit), deref(job.Spec.ActiveDeadlineSeconds))
		}
		if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
			t.Fatalf("Job: %d containers, %d init containers; want 1, 0", len(spec.Containers), len(spec.InitContainers))
		}
		c := spec.Containers[0]
		if len(c.Args) == 0 || c.Args[0] != "reconcile" || c.Image != dep.Image {
			t.Errorf("runs %s %q, want the Deployment's image %s running reconcile", c.Image, c.Args, dep.Image)
		}
		if i := slices.Index(c.Args, "--by"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] == "" || len(c.Args[i+1]) > 64 {
			t.Errorf("args %q: want --by NAME (who is kept with the run and its decisions)", c.Args)
		}
		if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != dep.EnvFrom[0].ConfigMapRef.Name {
			t.Errorf("envFrom %+v, want the Deployment's ConfigMap %s", c.EnvFrom, dep.EnvFrom[0].ConfigMapRef.Name)
		}
		env := containerEnv(t, r, c)
		checkCommandEnv(t, c.Name, c.Args, env, func(string) string { return secretName })
		if got := keys(env.fromSecret); !slices.Contains(got, "BILLING_DATABASE_URL") || len(got) != 2 {
			t.Errorf("secrets %v, want BILLING_DATABASE_URL and the gateway's", got)
		}
		checkPodSecurity(t, spec)
		if isTrue(spec.AutomountServiceAccountToken) || spec.AutomountServiceAccountToken == nil {
			t.Errorf("automountServiceAccountToken %v, want false (it calls no Kubernetes API)", deref(spec.AutomountServiceAccountToken))
		}
		limit, ok := c.Resources.Limits[corev1.ResourceMemory]
		var memLimit string
		for _, ev := range c.Env {
			if ev.Name == "GOMEMLIMIT" {
				memLimit = ev.Value
			}
		}
		n, err := goMemLimit(memLimit)
		if !ok || err != nil || float64(n)/float64(limit.Value()) < 0.85 || float64(n)/float64(limit.Value()) > 0.95 {
			t.Errorf("limits.memory %v, GOMEMLIMIT %q (%v): want a limit, and GOMEMLIMIT about 90%% of it", limit.String(), memLimit, err)
		}
		checkJobPodLabels(t, job, "Postgres and the gateway")
	})
}

// daily reports whether a cron schedule runs once a day: a fixed minute
// and hour, every day of every month, whatever the weekday.
func daily(schedule string) bool {
	f := strings.Fields(schedule)
	if len(f) != 5 || f[2] != "*" || f[3] != "*" || f[4] != "*" {
		return false
	}
	m, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	return err1 == nil && err2 == nil && m >= 0 && m < 60 && h >= 0 && h < 24
}
