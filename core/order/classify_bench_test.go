package order

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// BenchmarkClassify is the one mapping from an error to what the consumer
// does with its event, for errors as the adapters wrap them: the transient
// reply of a gateway (the common failure), a refusal, an outage, a
// validation error, a shutdown's cancellation, and an error of no known
// type (which walks every errors.As).
func BenchmarkClassify(b *testing.B) {
	reply := &GatewayReplyError{StatusCode: 503}
	for _, bc := range []struct {
		name string
		err  error
		want Class
	}{
		{"transient", fmt.Errorf("bill: %w", &TransientError{Op: "payment gateway charge", Err: fmt.Errorf("POST /charges: %w", reply)}), ClassTransient},
		{"refused", fmt.Errorf("bill: %w", &PermanentError{Op: "payment gateway charge", Err: &ChargeRefusedError{Kind: RefusalRejected, StatusCode: 400, Err: reply}}), ClassPermanent},
		{"outage", fmt.Errorf("bill: %w", &OutageError{Dependency: DependencyGateway, Err: reply}), ClassOutage},
		{"validation", fmt.Errorf("decode: %w", &ValidationError{Field: "order_id", Reason: "blank"}), ClassPermanent},
		{"canceled", fmt.Errorf("reserve: %w", context.Canceled), ClassCanceled},
		{"unknown", fmt.Errorf("reserve: %w", errors.New("something else")), ClassPermanent},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := Classify(bc.err); got != bc.want {
					b.Fatalf("Classify(%v) = %v, want %v", bc.err, got, bc.want)
				}
			}
		})
	}
}
