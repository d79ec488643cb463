package gatewaystub

import (
	"net/http"
	"strconv"
	"time"
)

// ListPage is the reply of the lookup and the list (docs/interface.md §6).
type ListPage struct {
	Charges    []ListedCharge `json:"charges"`
	NextCursor *string        `json:"next_cursor"`
}

// ListedCharge is one attempt in a ListPage.
type ListedCharge struct {
	ChargeID       string `json:"charge_id"`
	OrderID        string `json:"order_id"`
	IdempotencyKey string `json:"idempotency_key"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
	CreatedAt      string `json:"created_at"`
}

// serveList answers GET /charges?order_id=ID (every attempt of the order)
// and GET /charges?created_gte=T1&created_lt=T2[&cursor=C] (the attempts
// created in [T1, T2), a page at a time, oldest first; the cursor is where
// the previous page ended). Every attempt is served, whatever became of
// its key.
func (s *Stub) serveList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	call := Call{Route: "GET " + Path, OrderID: q.Get("order_id"), TraceParent: r.Header.Get(HeaderTraceParent), Time: time.Now()}
	rep := s.list(call, q.Get("order_id"), q.Get("created_gte"), q.Get("created_lt"), q.Get("cursor"))
	s.finish(w, call, rep)
}

func (s *Stub) list(call Call, orderID, gte, lt, cursor string) reply {
	var fault Fault
	s.mu.Lock()
	faultFn := s.fault
	s.mu.Unlock()
	if faultFn != nil {
		fault = faultFn(call, 0)
	}
	if fault.Status != 0 {
		return reply{status: fault.Status, body: errorBody{Error: "injected_fault"}, header: fault.Header}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if orderID != "" {
		page := ListPage{Charges: []ListedCharge{}}
		for _, a := range s.attempts {
			if a.OrderID == orderID {
				page.Charges = append(page.Charges, listed(a))
			}
		}
		return reply{status: http.StatusOK, body: page}
	}
	from, err1 := time.Parse(time.RFC3339Nano, gte)
	to, err2 := time.Parse(time.RFC3339Nano, lt)
	if err1 != nil || err2 != nil {
		return invalid("order_id, or created_gte and created_lt (RFC 3339), are required")
	}
	start := 0
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 0 || n > len(s.attempts) {
			return invalid("cursor is not one this gateway gave")
		}
		start = n
	}
	page := ListPage{Charges: []ListedCharge{}}
	i := start
	for ; i < len(s.attempts) && len(page.Charges) < s.pageSize; i++ {
		if a := s.attempts[i]; !a.Time.Before(from) && a.Time.Before(to) {
			page.Charges = append(page.Charges, listed(a))
		}
	}
	for ; i < len(s.attempts); i++ { // is there another in the period?
		if a := s.attempts[i]; !a.Time.Before(from) && a.Time.Before(to) {
			next := strconv.Itoa(i)
			page.NextCursor = &next
			break
		}
	}
	return reply{status: http.StatusOK, body: page}
}

func listed(a Attempt) ListedCharge {
	return ListedCharge{ChargeID: a.ID, OrderID: a.OrderID, IdempotencyKey: a.Key, Amount: a.Amount,
		Currency: a.Currency, Status: a.Status, CreatedAt: a.Time.UTC().Format(time.RFC3339Nano)}
}
