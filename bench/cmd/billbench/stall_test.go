package main

import (
	"testing"
	"testing/synctest"
	"time"
)

// A wait fails only once its count has not moved for the limit, however
// long it has been going: fake time in a synctest bubble, so the test
// waits for nothing.
func TestStallWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStallWatch(time.Minute)
		<-time.After(50 * time.Second)
		if w.stalled(0) {
			t.Fatal("stalled after 50 s of a 1 min limit")
		}
		<-time.After(11 * time.Second)
		if !w.stalled(0) {
			t.Fatal("not stalled after 61 s without a change")
		}
		// Ten minutes of slow progress: never stalled.
		for i := range 20 {
			<-time.After(30 * time.Second)
			if w.stalled(float64(i + 1)) {
				t.Fatalf("stalled at step %d although the count moved", i+1)
			}
		}
		<-time.After(61 * time.Second)
		if !w.stalled(20) {
			t.Fatal("not stalled after 61 s without a change following progress")
		}
	})
}
