package app

import (
	"context"
	"log/slog"
	"time"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	"github.com/acme/billing/infra/postgres"
)

// switchReadTimeout bounds one read of the consumption switch.
const switchReadTimeout = 5 * time.Second

// switchLoop reads the consumption switch (`billing consume pause` and
// `resume`, kept in Postgres) every SwitchInterval until ctx ends, so that
// every pod follows it within seconds, whatever the replica count. A read
// that fails (Postgres away: the outage pause has it) leaves the switch
// as it was; the first failure of a streak is logged.
func (a *App) switchLoop(ctx context.Context) {
	t := time.NewTicker(a.tune.SwitchInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := a.readSwitch(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			failing = true
			a.log.Warn("could not read the consumption switch; it stays as it was", slog.String("error", err.Error()))
		case err == nil && failing:
			failing = false
			a.log.Info("the consumption switch can be read again")
		}
	}
}

// readSwitch reads the consumption switch once and applies it.
func (a *App) readSwitch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, switchReadTimeout)
	defer cancel()
	st, err := a.store.ConsumeState(ctx)
	if err != nil {
		return err
	}
	a.applySwitch(st)
	return nil
}

// applySwitch holds consumption by the operator while st is a pause, and
// shows who paused and when (billing_operator_pause_timestamp_seconds).
func (a *App) applySwitch(st postgres.ConsumeState) {
	if !st.Paused {
		a.hold.Clear(kafkain.HoldOperator)
		if a.pausedBy != 0 {
			a.Metrics.OperatorPause.Reset()
			a.pausedBy = 0
		}
		return
	}
	why := "paused by " + st.DecidedBy + " at " + st.DecidedAt.UTC().Format(time.RFC3339)
	if st.Note != "" {
		why += ": " + st.Note
	}
	a.hold.Set(kafkain.HoldOperator, why)
	if a.pausedBy != st.ID {
		a.Metrics.OperatorPause.Reset()
		a.Metrics.OperatorPause.WithLabelValues(st.DecidedBy).Set(float64(st.DecidedAt.UnixMilli()) / 1000)
		a.pausedBy = st.ID
	}
}
