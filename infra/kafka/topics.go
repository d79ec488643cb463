package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	kafkago "github.com/segmentio/kafka-go"
)

// MaxMessageBytesConfig is the topic config that bounds a record batch.
const MaxMessageBytesConfig = "max.message.bytes"

// MaxMessageBytes returns the effective max.message.bytes of topic: its own
// setting or, without one, the broker's message.max.bytes.
func (c *Cluster) MaxMessageBytes(ctx context.Context, topic string) (int, error) {
	got, err := c.maxMessageBytes(ctx, []string{topic})
	if err != nil {
		return 0, err
	}
	n, ok := got[topic]
	if !ok {
		return 0, fmt.Errorf("describe configs of %s: no %s", topic, MaxMessageBytesConfig)
	}
	return n, nil
}

func (c *Cluster) maxMessageBytes(ctx context.Context, topics []string) (map[string]int, error) {
	cl, done := c.client()
	defer done()
	req := &kafkago.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafkago.DescribeConfigRequestResource{
			ResourceType: kafkago.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{MaxMessageBytesConfig}})
	}
	res, err := cl.DescribeConfigs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("describe configs: %w", err)
	}
	out := map[string]int{}
	var errs []error
	for _, r := range res.Resources {
		if r.Error != nil {
			errs = append(errs, fmt.Errorf("describe configs of %s: %w", r.ResourceName, r.Error))
			continue
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != MaxMessageBytesConfig {
				continue
			}
			n, err := strconv.Atoi(e.ConfigValue)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s of %s: %w", MaxMessageBytesConfig, r.ResourceName, err))
				continue
			}
			out[r.ResourceName] = n
		}
	}
	return out, oneLineErrors(errs).orNil()
}

// raiseMaxMessageBytes sets max.message.bytes of every existing topic in
// want that is below its wanted value, leaving higher ones as they are.
// It uses IncrementalAlterConfigs (Kafka 2.3+), which changes only that
// config; AlterConfigs would reset every other override of the topic.
func (c *Cluster) raiseMaxMessageBytes(ctx context.Context, want map[string]int) error {
	topics := make([]string, 0, len(want))
	for t := range want {
		topics = append(topics, t)
	}
	have, err := c.maxMessageBytes(ctx, topics)
	req := &kafkago.IncrementalAlterConfigsRequest{}
	for t, n := range want {
		if h, ok := have[t]; ok && h >= n {
			continue
		}
		req.Resources = append(req.Resources, kafkago.IncrementalAlterConfigsRequestResource{
			ResourceType: kafkago.ResourceTypeTopic, ResourceName: t,
			Configs: []kafkago.IncrementalAlterConfigsRequestConfig{{
				Name: MaxMessageBytesConfig, Value: strconv.Itoa(n), ConfigOperation: kafkago.ConfigOperationSet}},
		})
	}
	if len(req.Resources) == 0 {
		return err
	}
	cl, done := c.client()
	defer done()
	res, aerr := cl.IncrementalAlterConfigs(ctx, req)
	if aerr != nil {
		return errors.Join(err, fmt.Errorf("raise %s: %w", MaxMessageBytesConfig, aerr))
	}
	errs := []error{err}
	for _, r := range res.Resources {
		if r.Error != nil {
			errs = append(errs, fmt.Errorf("raise %s of %s to %d: %w", MaxMessageBytesConfig, r.ResourceName, want[r.ResourceName], r.Error))
		}
	}
	return oneLineErrors(errs).orNil()
}

// orNil drops nil errors and returns nil when none is left.
func (e oneLineErrors) orNil() error {
	var out oneLineErrors
	for _, err := range e {
		if err != nil {
			out = append(out, err)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// routedHeadroom is room for the headers routing adds to a record (x-error
// alone may take 1 KiB) and for the batch framing around it.
const routedHeadroom = 64 << 10

// RoutedMaxMessageBytes is the max.message.bytes a retry tier or the DLQ
// needs when the main topic accepts mainMax: what the main topic takes, with
// its routing headers, and never less than 8 MiB, so that a bad record a
// little over the broker's default still arrives whole.
func RoutedMaxMessageBytes(mainMax int) int {
	return max(8<<20, mainMax+routedHeadroom)
}

// TierTopics returns the retry tier topics "<prefix>.N" (N = 1..) that exist
// on the cluster, by N. It reads the metadata of every topic the service
// may see.
func (c *Cluster) TierTopics(ctx context.Context, prefix string) (map[int]string, error) {
	cl, done := c.client()
	defer done()
	md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{})
	if err != nil {
		return nil, fmt.Errorf("kafka metadata: %w", err)
	}
	out := map[int]string{}
	for _, t := range md.Topics {
		if t.Error != nil {
			continue
		}
		rest, ok := strings.CutPrefix(t.Name, prefix+".")
		if !ok || rest == "" || rest[0] < '1' || rest[0] > '9' {
			continue
		}
		if n, err := strconv.Atoi(rest); err == nil && n > 0 {
			out[n] = t.Name
		}
	}
	return out, nil
}
