package app

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"time"
)

// source is a topic the service consumes, with its group and the tier the
// consumer acts as.
type source struct {
	topic, group string
	tier         int
}

// sources lists the main topic, the configured retry tiers, and the tiers
// beyond the configured count that still exist on the cluster
// (BILLING_RETRY_DELAYS was shortened): those are consumed as the last
// tier, with their own group <group>.retry.N so they resume where they
// stopped, their failures going to the DLQ and their delay being the last
// one (docs/interface.md §2). Without the cluster's metadata only the configured
// topics are consumed, and the failure is logged.
func (a *App) sources(ctx context.Context) []source {
	cfg := a.cfg
	last := len(cfg.RetryDelays)
	out := []source{{topic: cfg.KafkaTopic, group: cfg.KafkaGroupID}}
	for n := 1; n <= last; n++ {
		out = append(out, source{cfg.RetryTopic(n), tierGroup(cfg.KafkaGroupID, n), n})
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	tiers, err := a.kc.TierTopics(ctx, cfg.KafkaRetryTopicPrefix)
	if err != nil {
		a.log.Warn("could not look for retry tiers beyond BILLING_RETRY_DELAYS; records left there wait",
			slog.String("error", err.Error()))
		return out
	}
	ns := make([]int, 0, len(tiers))
	for n := range tiers {
		if n > last && tiers[n] != cfg.KafkaTopic && tiers[n] != cfg.KafkaDLQTopic {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	for _, n := range ns {
		a.log.Info("consuming a retry tier beyond BILLING_RETRY_DELAYS as the last tier",
			slog.String("topic", tiers[n]), slog.Int("as_tier", last))
		out = append(out, source{tiers[n], tierGroup(cfg.KafkaGroupID, n), last})
	}
	return out
}

// tierGroup is the consumer group of retry tier n: <group>.retry.N.
func tierGroup(group string, n int) string { return group + ".retry." + strconv.Itoa(n) }

// groups lists the consumer groups of the main topic and the configured
// tiers: the groups the release gate describes. A tier beyond the
// configured count (sources) is left out: every release consumes the main
// topic, so a member of another release shows in the main group.
func (a *App) groups() []string {
	out := []string{a.cfg.KafkaGroupID}
	for n := 1; n <= len(a.cfg.RetryDelays); n++ {
		out = append(out, tierGroup(a.cfg.KafkaGroupID, n))
	}
	return out
}
