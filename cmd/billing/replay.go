package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/app"
	"github.com/acme/billing/internal/config"
)

// dlqReplay implements `billing dlq replay [--since T] [--limit N] [--dry-run]`.
func dlqReplay(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("dlq replay", stderr)
	since := fs.String("since", "", "replay only records whose x-failed-at is at or after this RFC 3339 time")
	// A string, checked by limitArg: the flag package would quote a bad
	// number whole in its error.
	limitText := fs.String("limit", "", "stop after this many records, 1 to 1000000 (default: no limit)")
	dry := fs.Bool("dry-run", false, "write nothing; print how many records would be replayed")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dlq replay: unexpected argument %q", fs.Arg(0)[:min(len(fs.Arg(0)), 64)])
	}
	limit, err := limitArg("--limit", *limitText)
	if err != nil {
		return err
	}
	opts := kafkain.ReplayOptions{Limit: limit, DryRun: *dry, MaxBatchBytes: int(cfg.KafkaMaxBatchBytes)}
	for n := range len(cfg.RetryDelays) {
		opts.Tiers = append(opts.Tiers, cfg.RetryTopic(n+1))
	}
	if *since != "" {
		if opts.Since, err = sinceArg("--since", *since, time.Now()); err != nil {
			return err
		}
	}
	kc, err := kafkaclient.NewCluster(app.KafkaSettings(cfg))
	if err != nil {
		return err
	}
	res, err := kafkain.Replay(ctx, kc, cfg.KafkaDLQTopic, cfg.KafkaTopic, opts, log)
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
