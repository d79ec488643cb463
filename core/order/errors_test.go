package order

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	twice := func(err error) error {
		return fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", err))
	}
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"validation", &ValidationError{Field: "event_id", Reason: "nil UUID"}, ClassPermanent},
		{"validation wrapped twice", twice(&ValidationError{Reason: "empty value"}), ClassPermanent},
		{"permanent", &PermanentError{Op: "charge", Err: errBoom}, ClassPermanent},
		{"permanent wrapped twice", twice(&PermanentError{Op: "charge", Err: errBoom}), ClassPermanent},
		{"transient", &TransientError{Op: "charge", Err: errBoom}, ClassTransient},
		{"transient wrapped twice", twice(&TransientError{Op: "charge", Err: errBoom}), ClassTransient},
		{"outage", &OutageError{Dependency: "postgres", Err: errBoom}, ClassOutage},
		{"outage wrapped twice", twice(&OutageError{Dependency: "kafka", Err: errBoom}), ClassOutage},
		{"outage wrapping a transient", &OutageError{Dependency: "gateway", Err: &TransientError{Op: "charge", Err: errBoom}}, ClassOutage},
		{"transient wrapping an outage", &TransientError{Op: "reserve", Err: &OutageError{Dependency: "postgres", Err: errBoom}}, ClassOutage},
		{"outage wrapping a permanent", twice(&OutageError{Dependency: "postgres", Err: &PermanentError{Op: "x", Err: errBoom}}), ClassOutage},
		{"outage joined with a validation error", errors.Join(&ValidationError{Reason: "x"}, &OutageError{Dependency: "kafka", Err: errBoom}), ClassOutage},
		{"outage wrapping context.Canceled", &OutageError{Dependency: "postgres", Err: context.Canceled}, ClassOutage},
		{"context.Canceled", context.Canceled, ClassCanceled},
		{"context.Canceled wrapped twice", twice(context.Canceled), ClassCanceled},
		{"transient wrapping context.Canceled", &TransientError{Op: "charge", Err: context.Canceled}, ClassCanceled},
		{"context.DeadlineExceeded", context.DeadlineExceeded, ClassTransient},
		{"context.DeadlineExceeded wrapped twice", twice(context.DeadlineExceeded), ClassTransient},
		{"permanent wrapping a deadline", &PermanentError{Op: "charge", Err: context.DeadlineExceeded}, ClassPermanent},
		{"plain error", errBoom, ClassPermanent},
		{"plain error wrapped twice", twice(errBoom), ClassPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestClassString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c    Class
		want string
	}{
		{ClassPermanent, "permanent"},
		{ClassTransient, "transient"},
		{ClassOutage, "outage"},
		{ClassCanceled, "canceled"},
		{Class(42), "Class(42)"},
	}
	for _, tt := range tests {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("Class(%d).String() = %q, want %q", int(tt.c), got, tt.want)
		}
	}
}

func TestErrorMessagesAndUnwrap(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"validation of a field", &ValidationError{Field: "currency", Reason: "want 3 upper-case letters A-Z"}, "invalid event: currency: want 3 upper-case letters A-Z"},
		{"validation of the value", &ValidationError{Reason: "empty value"}, "invalid event: empty value"},
		{"permanent", &PermanentError{Op: "charge ord-1", Err: errBoom}, "charge ord-1: boom"},
		{"transient", &TransientError{Op: "charge ord-1", Err: errBoom}, "charge ord-1: boom"},
		{"outage", &OutageError{Dependency: "postgres", Err: errBoom}, "postgres unavailable: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			if !strings.HasPrefix(tt.name, "validation") && !errors.Is(tt.err, errBoom) {
				t.Errorf("errors.Is(%v, errBoom) = false, want true", tt.err)
			}
		})
	}
}
