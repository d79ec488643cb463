package deploy

import (
	"slices"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The custom resources the manifests use, as far as they use them: the
// CRDs' Go modules (KEDA, Strimzi) are not dependencies of this module, so
// these mirror their field names (keda.sh/v1alpha1, kafka.strimzi.io/v1beta2)
// and decoding stays strict: a misspelt field fails.

// scaledObject is keda.sh/v1alpha1 ScaledObject.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		Advanced        *struct {
			HorizontalPodAutoscalerConfig *struct {
				Name     string                                         `json:"name,omitempty"`
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// triggerAuthentication is keda.sh/v1alpha1 TriggerAuthentication.
type triggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef,omitempty"`
		Env []struct {
			Parameter     string `json:"parameter"`
			Name          string `json:"name"`
			ContainerName string `json:"containerName,omitempty"`
		} `json:"env,omitempty"`
	} `json:"spec"`
}

// kafkaTopic is kafka.strimzi.io/v1beta2 KafkaTopic.
type kafkaTopic struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		TopicName  string            `json:"topicName,omitempty"`
		Partitions int32             `json:"partitions"`
		Replicas   int32             `json:"replicas"`
		Config     map[string]string `json:"config,omitempty"`
	} `json:"spec"`
}

// kafkaUser is kafka.strimzi.io/v1beta2 KafkaUser.
type kafkaUser struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Authentication struct {
			Type string `json:"type"`
		} `json:"authentication"`
		Authorization struct {
			Type string `json:"type"`
			ACLs []struct {
				Resource struct {
					Type        string `json:"type"`
					Name        string `json:"name"`
					PatternType string `json:"patternType"`
				} `json:"resource"`
				Operations []string `json:"operations"`
				Host       string   `json:"host,omitempty"`
			} `json:"acls"`
		} `json:"authorization"`
	} `json:"spec"`
}

// TestStrimziExample: the example KafkaUser grants what the service does
// with the base configuration's topics and groups, and the main topic has
// as many partitions as the autoscalers may run pods.
func TestStrimziExample(t *testing.T) {
	t.Parallel()
	r := render(t, strimziDir)
	cm := configMapNamed(t, render(t, baseDir), configMap)
	group, topic := effective(t, cm, "BILLING_KAFKA_GROUP_ID"), effective(t, cm, "BILLING_KAFKA_TOPIC")
	tierPrefix, dlq := effective(t, cm, "BILLING_KAFKA_RETRY_TOPIC_PREFIX")+".", effective(t, cm, "BILLING_KAFKA_DLQ_TOPIC")
	invoices := effective(t, cm, "BILLING_KAFKA_INVOICE_TOPIC")

	u := get[kafkaUser](t, r, "KafkaUser", appName)
	granted := grants(u)
	manage := []string{"Read", "Write", "Describe", "Create", "DescribeConfigs", "AlterConfigs"}
	for k, ops := range map[string][]string{
		"topic/literal/" + topic:            {"Read", "Describe", "DescribeConfigs"},
		"topic/prefix/" + tierPrefix:        manage,
		"topic/literal/" + dlq:              manage,
		"topic/literal/" + invoices:         {"Write", "Describe", "Create"},
		"group/literal/" + group:            {"Read", "Describe"},
		"group/prefix/" + group + ".retry.": {"Read", "Describe"},
	} {
		for _, op := range ops {
			if !granted[k][op] {
				t.Errorf("KafkaUser %s: no %s on %s", u.Name, op, k)
			}
		}
	}

	// Least privilege: only `billing dlq replay` writes to the main topic,
	// as its own user (TestStrimziReplayUser); the pods cannot.
	if ops := allowed(u, "topic", topic); ops["Write"] || ops["All"] {
		t.Errorf("KafkaUser %s may write to the main topic %s (%v): only the replay user may", u.Name, topic, keys(ops))
	}

	topics := map[string]int32{}
	for _, o := range r.objects {
		if kt, ok := o.(*kafkaTopic); ok {
			topics[kt.Spec.TopicName] = kt.Spec.Partitions
		}
	}
	for _, n := range []string{topic, tierPrefix + "1", dlq, invoices} {
		if _, ok := topics[n]; !ok {
			t.Errorf("no KafkaTopic for %s; have %v", n, keys(topics))
		}
	}
	for _, dir := range []string{baseDir + "+" + compKEDA, baseDir + "+" + compHPA} {
		rr := render(t, dir)
		for _, o := range rr.objects {
			var meta metav1.ObjectMeta
			switch a := o.(type) {
			case *scaledObject:
				meta = a.ObjectMeta
			case *autoscalingv2.HorizontalPodAutoscaler:
				meta = a.ObjectMeta
			default:
				continue
			}
			if p := partitionsOf(t, meta); p != topics[topic] {
				t.Errorf("%s %s: %s %d, KafkaTopic %s has %d partitions", dir, meta.Name, partitionsAn, p, topic, topics[topic])
			}
		}
	}
}

// replayUser is the KafkaUser `billing dlq replay` runs as (deploy/README.md).
const replayUser = appName + "-replay"

// TestStrimziReplayUser: `billing dlq replay` has a user of its own that may
// do what replay does and nothing else: read the DLQ, read a stub's
// original (the main topic or a tier), write the main topic; no group, no
// write anywhere else, no topic management.
func TestStrimziReplayUser(t *testing.T) {
	t.Parallel()
	r := render(t, strimziDir)
	cm := configMapNamed(t, render(t, baseDir), configMap)
	topic, tierPrefix, dlq := effective(t, cm, "BILLING_KAFKA_TOPIC"),
		effective(t, cm, "BILLING_KAFKA_RETRY_TOPIC_PREFIX")+".", effective(t, cm, "BILLING_KAFKA_DLQ_TOPIC")
	u := get[kafkaUser](t, r, "KafkaUser", replayUser)
	if u.Spec.Authentication.Type != get[kafkaUser](t, r, "KafkaUser", appName).Spec.Authentication.Type {
		t.Errorf("KafkaUser %s authenticates by %q, want what the service's user does", u.Name, u.Spec.Authentication.Type)
	}
	want := map[string][]string{
		"topic/" + topic:            {"Describe", "Read", "Write"},
		"topic/" + tierPrefix + "1": {"Describe", "Read"},
		"topic/" + dlq:              {"Describe", "Read"},
		"group/" + appName:          nil,
		"topic/some.other.topic":    nil,
	}
	for k, ops := range want {
		typ, name, _ := strings.Cut(k, "/")
		got := keys(allowed(u, typ, name))
		slices.Sort(got)
		if !slices.Equal(got, ops) {
			t.Errorf("KafkaUser %s on %s: operations %v, want %v", u.Name, k, got, ops)
		}
	}
	for _, a := range u.Spec.Authorization.ACLs {
		if a.Resource.Type != "topic" {
			t.Errorf("KafkaUser %s: ACL on %s %s, want topics only", u.Name, a.Resource.Type, a.Resource.Name)
		}
	}
}

// grants returns the operations of u's ACLs by type/pattern/name.
func grants(u *kafkaUser) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, a := range u.Spec.Authorization.ACLs {
		k := a.Resource.Type + "/" + a.Resource.PatternType + "/" + a.Resource.Name
		if out[k] == nil {
			out[k] = map[string]bool{}
		}
		for _, op := range a.Operations {
			out[k][op] = true
		}
	}
	return out
}

// allowed returns the operations u's ACLs allow on the resource typ/name,
// through literal names, prefixes and the "*" wildcard alike.
func allowed(u *kafkaUser, typ, name string) map[string]bool {
	out := map[string]bool{}
	for _, a := range u.Spec.Authorization.ACLs {
		res := a.Resource
		match := res.Name == "*" ||
			(res.PatternType == "prefix" && strings.HasPrefix(name, res.Name)) ||
			((res.PatternType == "literal" || res.PatternType == "") && res.Name == name)
		if res.Type != typ || !match {
			continue
		}
		for _, op := range a.Operations {
			out[op] = true
		}
	}
	return out
}
