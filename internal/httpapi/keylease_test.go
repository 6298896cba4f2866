package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/idempotency"
	"berth.dev/berth/internal/pg"
)

// A hold's key left claimed with neither answer nor effect (its process
// died between the hold's commit of a refusal and the answer, or a
// database outage kept the answer from being stored) holds up the retry
// for a hold's short lease, not the minute of other keyed requests: the
// hold's work is bounded to seconds, and its effect would have committed
// with its claim.
func TestHoldKeyLeftClaimedIsFreeAfterAHoldsLease(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	flightID := s.CreateFlight(t, apptest.Fare{Class: "ECONOMY", Price: 1000, Seats: apptest.Seats(1, 1, "AB")})
	body := fmt.Sprintf(`{"flightId": %d, "fareClass": "ECONOMY", "quantity": 1}`, flightID)
	// The claim exactly as a hold's batch sends it, and nothing after it.
	q := idempotency.NewRequest(7, "left", http.MethodPost, "/bookings", []byte(body))
	var b pgx.Batch
	idempotency.QueueClaims(&b, []pg.KeyClaim{idempotency.Pending(q)}, s.Clock.Now())
	if err := s.App.Pool.SendBatch(t.Context(), &b).Close(); err != nil {
		t.Fatal(err)
	}
	hold := func() *apptest.Response {
		return s.Do(apptest.Request{Method: http.MethodPost, Path: "/bookings", Token: s.Token("customer", 7),
			Header: map[string]string{"Idempotency-Key": "left"}, Body: body})
	}
	if r := hold(); r.Status != http.StatusConflict || r.Code() != "idempotency_key_in_use" {
		t.Fatalf("during the lease: %d %s, want 409 idempotency_key_in_use", r.Status, r.Body)
	}
	s.Clock.Advance(idempotency.ShortLease)
	if r := hold(); r.Status != http.StatusCreated {
		t.Fatalf("after a hold's lease: %d %s, want 201", r.Status, r.Body)
	}
	apptest.MustAudit(t, s.App.Pool, s.Clock.Now())
}
