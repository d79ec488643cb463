package config

import (
	"fmt"
	"strconv"
	"strings"
)

// tierOf reports whether topic is retry tier N of prefix ("<prefix>.N",
// N = 1..) and which.
func tierOf(prefix, topic string) (int, bool) {
	rest, ok := strings.CutPrefix(topic, prefix+".")
	if !ok || rest == "" || rest[0] == '0' || rest[0] == '+' {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// validateTopics rejects a main topic, retry tier, DLQ or invoice topic
// that coincide: routing would write a record back to the topic it came
// from, mix events with failed ones, or publish billing's decisions where
// orders are read. A main or DLQ topic named like any tier
// ("<prefix>.N", whatever N) is rejected, not only N up to the number of
// delays: tiers beyond that count are still consumed (docs/interface.md §2).
func (c Kafka) validateTopics() error {
	if c.KafkaTopic == c.KafkaDLQTopic {
		return &Error{"BILLING_KAFKA_DLQ_TOPIC", fmt.Sprintf("equals BILLING_KAFKA_TOPIC (%q): the DLQ must be another topic", c.KafkaTopic)}
	}
	if n, ok := tierOf(c.KafkaRetryTopicPrefix, c.KafkaTopic); ok {
		return &Error{"BILLING_KAFKA_TOPIC", fmt.Sprintf("%q is retry tier %d of BILLING_KAFKA_RETRY_TOPIC_PREFIX %q: the main topic must be another topic",
			c.KafkaTopic, n, c.KafkaRetryTopicPrefix)}
	}
	if n, ok := tierOf(c.KafkaRetryTopicPrefix, c.KafkaDLQTopic); ok {
		return &Error{"BILLING_KAFKA_DLQ_TOPIC", fmt.Sprintf("%q is retry tier %d of BILLING_KAFKA_RETRY_TOPIC_PREFIX %q: the DLQ must be another topic",
			c.KafkaDLQTopic, n, c.KafkaRetryTopicPrefix)}
	}
	for _, other := range []struct{ name, topic string }{{"BILLING_KAFKA_TOPIC", c.KafkaTopic}, {"BILLING_KAFKA_DLQ_TOPIC", c.KafkaDLQTopic}} {
		if c.KafkaInvoiceTopic == other.topic {
			return &Error{"BILLING_KAFKA_INVOICE_TOPIC", fmt.Sprintf("equals %s (%q): invoice events need a topic of their own", other.name, other.topic)}
		}
	}
	if n, ok := tierOf(c.KafkaRetryTopicPrefix, c.KafkaInvoiceTopic); ok {
		return &Error{"BILLING_KAFKA_INVOICE_TOPIC", fmt.Sprintf("%q is retry tier %d of BILLING_KAFKA_RETRY_TOPIC_PREFIX %q: invoice events need a topic of their own",
			c.KafkaInvoiceTopic, n, c.KafkaRetryTopicPrefix)}
	}
	return nil
}
