package config

import (
	"strings"
	"testing"
)

// A main topic, retry tier or DLQ that coincide would loop records or mix
// them: rejected at start with one line naming the variables involved.
func TestLoadRejectsCoincidingTopics(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		wantVars []string
	}{
		{"dlq is main", map[string]string{"BILLING_KAFKA_DLQ_TOPIC": "orders.order-confirmed.v1"},
			[]string{"BILLING_KAFKA_DLQ_TOPIC", "BILLING_KAFKA_TOPIC"}},
		{"tier is main", map[string]string{"BILLING_KAFKA_TOPIC": "billing.order-confirmed.retry.2"},
			[]string{"BILLING_KAFKA_TOPIC", "BILLING_KAFKA_RETRY_TOPIC_PREFIX"}},
		{"tier is dlq", map[string]string{"BILLING_KAFKA_DLQ_TOPIC": "billing.order-confirmed.retry.1"},
			[]string{"BILLING_KAFKA_DLQ_TOPIC", "BILLING_KAFKA_RETRY_TOPIC_PREFIX"}},
		{"tier is main via prefix", map[string]string{"BILLING_KAFKA_TOPIC": "r.3", "BILLING_KAFKA_RETRY_TOPIC_PREFIX": "r"},
			[]string{"BILLING_KAFKA_TOPIC", "BILLING_KAFKA_RETRY_TOPIC_PREFIX"}},
		// A tier beyond the configured count is still consumed (docs/interface.md §2).
		{"main is a tier beyond the count", map[string]string{"BILLING_KAFKA_TOPIC": "billing.order-confirmed.retry.9"},
			[]string{"BILLING_KAFKA_TOPIC", "BILLING_KAFKA_RETRY_TOPIC_PREFIX"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setBase(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := Load()
			if err == nil {
				t.Fatalf("Load() accepted %v", tc.env)
			}
			for _, v := range tc.wantVars {
				if !strings.Contains(err.Error(), v) || strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q should be one line naming %s", err, v)
				}
			}
		})
	}
}

// Names that only look alike are fine.
func TestLoadAcceptsDistinctTopics(t *testing.T) {
	setBase(t)
	t.Setenv("BILLING_KAFKA_TOPIC", "billing.order-confirmed.retry")
	t.Setenv("BILLING_KAFKA_DLQ_TOPIC", "billing.order-confirmed.retry.x")
	if _, err := Load(); err != nil {
		t.Fatalf("Load: %v", err)
	}
}
