package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
)

// consumePauseHelp and consumeResumeHelp are what `billing consume pause -h`
// and `billing consume resume -h` say below the usage line and summary.
const (
	consumePauseHelp = `Every pod of the deployment stops taking events within 10 s, whatever the replica count or
autoscaler: in-flight events finish, offsets are committed, the pods leave the consumer groups,
nothing is fetched and no key is sent (the pending completer pauses too; the outbox relay and the
dedup maintenance go on). Pods stay ready. The state is kept in Postgres (the decision table):
it survives restarts, and a pod started while paused never fetches.
--by NAME    who decides (1-64 printable characters), kept with the decision
--note TEXT  why (at most 512 printable characters), kept with the decision
Reads the database part of the configuration. Prints the switch before and after.`
	consumeResumeHelp = `Every pod joins its consumer groups again within seconds and takes events where the groups'
committed offsets are.
--by NAME    who decides (1-64 printable characters), kept with the decision
Reads the database part of the configuration. Prints the switch before and after.`
)

// switchArgs is what `billing consume pause|resume` was asked.
type switchArgs struct {
	by, note string
}

// parseSwitch reads --by NAME and, for a pause, --note TEXT, under the
// rules every command's arguments follow (args.go).
func parseSwitch(name string, withNote bool, args []string, stderr io.Writer) (switchArgs, error) {
	fs := flagSet(name, stderr)
	by := fs.String("by", "", "who decides")
	var note *string
	if withNote {
		note = fs.String("note", "", "why")
	}
	if err := fs.Parse(args); err != nil {
		return switchArgs{}, errUsage
	}
	if fs.NArg() > 0 {
		return switchArgs{}, fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0)[:min(len(fs.Arg(0)), 64)])
	}
	var a switchArgs
	var err error
	if a.by, err = nameArg("--by", *by); err != nil {
		return switchArgs{}, fmt.Errorf("%s: %w", name, err)
	}
	if note != nil {
		if a.note, err = noteArg("--note", *note); err != nil {
			return switchArgs{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	return a, nil
}

// consumePause implements `billing consume pause --by NAME [--note TEXT]`.
func consumePause(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	a, err := parseSwitch("consume pause", true, args, stderr)
	if err != nil {
		return err
	}
	return setConsumption(ctx, cfg, log, true, a, stdout)
}

// consumeResume implements `billing consume resume --by NAME`.
func consumeResume(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	a, err := parseSwitch("consume resume", false, args, stderr)
	if err != nil {
		return err
	}
	return setConsumption(ctx, cfg, log, false, a, stdout)
}

// setConsumption records the decision and prints the switch before and
// after. It reads the database's part of the configuration alone
// (docs/interface.md §1), so that a person or a Job can run it without the
// service's Kafka or gateway settings; its log goes to stderr, the switch
// to stdout.
func setConsumption(ctx context.Context, cfg config.Config, log *slog.Logger, paused bool, a switchArgs, stdout io.Writer) error {
	pool, err := postgres.NewPool(ctx, cfg.DatabaseURL.Reveal(), 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	before, after, err := postgres.NewStore(pool).SetConsumption(ctx, paused, a.by, a.note)
	if err != nil {
		if why := postgres.Misconfigured(err); why != "" {
			return fmt.Errorf("postgres: %s: check BILLING_DATABASE_URL", why)
		}
		return err
	}
	fmt.Fprintln(stdout, "before: "+describeSwitch(before))
	fmt.Fprintln(stdout, "after:  "+describeSwitch(after))
	command := "consume resume"
	if paused {
		command = "consume pause"
	}
	log.Info("consumption switch set", slog.String("command", command), slog.String("decided_by", a.by),
		slog.String("note", a.note), slog.Int64("decision", after.ID), slog.Bool("was_paused", before.Paused))
	return nil
}

// describeSwitch is one line of the switch for a person.
func describeSwitch(st postgres.ConsumeState) string {
	if st.ID == 0 {
		return "consuming (never paused)"
	}
	state := "consuming: resumed"
	if st.Paused {
		state = "paused"
	}
	line := fmt.Sprintf("%s by %s at %s (decision %d)", state, st.DecidedBy, st.DecidedAt.UTC().Format(time.RFC3339), st.ID)
	if st.Note != "" {
		line += ": " + st.Note
	}
	return line
}
