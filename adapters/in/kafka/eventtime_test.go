package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
)

type chargeAllBiller struct{}

func (chargeAllBiller) Bill(context.Context, order.OrderConfirmedEvent) (order.Outcome, error) {
	return order.OutcomeCharged, nil
}

// The delay SLI dates an event by the occurred_at its handler decoded,
// without decoding the value a second time; a record no handler dated is
// dated by its value, then by its timestamp.
func TestEventTimeFromTheHandlersDecode(t *testing.T) {
	occurred := time.Date(2026, 12, 2, 10, 0, 0, 250e6, time.UTC)
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: "ord-1", CustomerID: "cus-1", TotalAmount: 100, Currency: "EUR", ConfirmedAt: occurred})
	if err != nil {
		t.Fatal(err)
	}
	value, err := wire.Encode(evt)
	if err != nil {
		t.Fatal(err)
	}
	stamp := occurred.Add(time.Hour)

	msg := Record{Topic: "orders", Value: value, Time: stamp, dated: new(time.Time)}
	if _, err := NewOrderConfirmedHandler(chargeAllBiller{}, "USD").Handle(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if !msg.dated.Equal(occurred) {
		t.Fatalf("the handler noted %v, want the event's occurred_at %v", *msg.dated, occurred)
	}
	msg.Value = []byte("not json") // what eventTime returns now comes from the note alone
	if got := eventTime(msg); !got.Equal(occurred) {
		t.Errorf("eventTime of a dated record = %v, want the noted %v", got, occurred)
	}

	undated := Record{Value: value, Time: stamp}
	if got := eventTime(undated); !got.Equal(occurred) {
		t.Errorf("eventTime of an undated record = %v, want its value's occurred_at %v", got, occurred)
	}
	undated.Value = []byte("not json")
	if got := eventTime(undated); !got.Equal(stamp) {
		t.Errorf("eventTime of an undated, unreadable record = %v, want its timestamp %v", got, stamp)
	}
}
