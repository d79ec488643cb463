package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/app"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/replay"
)

// dlqReplay implements `billing dlq replay [--since T] [--limit N] [--dry-run]`.
func dlqReplay(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("dlq replay", stderr)
	since := fs.String("since", "", "replay only records whose x-failed-at is at or after this RFC 3339 time")
	limit := fs.Int("limit", 0, "stop after this many records (0: no limit)")
	dry := fs.Bool("dry-run", false, "write nothing; print how many records would be replayed")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	opts := replay.Options{Limit: *limit, DryRun: *dry}
	for n := range len(cfg.RetryDelays) {
		opts.Tiers = append(opts.Tiers, cfg.RetryTopic(n+1))
	}
	if *since != "" {
		t, err := time.Parse(time.RFC3339Nano, *since)
		if err != nil {
			return fmt.Errorf("--since: %q is not an RFC 3339 time", *since)
		}
		opts.Since = t
	}
	if *limit < 0 {
		return fmt.Errorf("--limit: must not be negative")
	}
	kc, err := kafkaclient.NewCluster(app.KafkaSettings(cfg))
	if err != nil {
		return err
	}
	res, err := replay.Replay(ctx, kc, cfg.KafkaDLQTopic, cfg.KafkaTopic, opts, log)
	if err != nil {
		return err
	}
	// Skipped records are stubs whose original cannot be replayed; each
	// has its own log line saying why.
	if *dry {
		fmt.Fprintf(stdout, "would replay %d records, skip %d\n", res.Replayed, res.Skipped)
	} else {
		fmt.Fprintf(stdout, "replayed %d records, skipped %d\n", res.Replayed, res.Skipped)
	}
	return nil
}
