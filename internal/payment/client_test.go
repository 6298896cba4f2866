package payment_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/config"
	"berth.dev/berth/internal/fault"
	"berth.dev/berth/internal/payment"
)

// The Standard Webhooks specification's published vector: berth signs and
// verifies exactly as the specification's own libraries do.
func TestSignatureMatchesStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	key, err := config.WebhookKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"test": 2432232314}`)
	const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if got := payment.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body); got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
	h := http.Header{}
	h.Set(payment.HeaderID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set(payment.HeaderTimestamp, "1614265330")
	h.Set(payment.HeaderSignature, "v1,bm9wZQ== "+want)
	if err := payment.Verify(key, h, body, time.Unix(1614265330, 0)); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if err := payment.Verify(key, h, body, time.Unix(1614265330, 0).Add(payment.Tolerance+time.Second)); !fault.Is(err, fault.Unauthenticated) {
		t.Errorf("Verify 5m1s later: %v, want unauthenticated", err)
	}
}

// gatewayStub answers with the statuses in script, one per request (the
// last one repeated), and records the idempotency keys it saw.
type gatewayStub struct {
	mu     sync.Mutex
	script []int
	keys   []string
	hang   bool
}

func (g *gatewayStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.keys = append(g.keys, r.Header.Get("Idempotency-Key"))
	status := g.script[min(len(g.keys), len(g.script))-1]
	hang := g.hang
	g.mu.Unlock()
	// Read the body first: only then does the server notice a client
	// that gave up and cancel the request's context.
	_, _ = io.Copy(io.Discard, r.Body)
	if hang {
		<-r.Context().Done()
		return
	}
	w.WriteHeader(status)
	if status == http.StatusCreated {
		_, _ = w.Write([]byte(`{"providerTxnId": "txn-1", "checkoutUrl": "https://pay.invalid/1"}`))
	}
}

func (g *gatewayStub) hits() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.keys...)
}

func newStub(t *testing.T, g *gatewayStub, o payment.ClientOptions) *payment.Client {
	t.Helper()
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	if o.Backoff == 0 {
		o.Backoff = time.Millisecond
	}
	return payment.NewClient(srv.URL, o)
}

var chargeReq = payment.ChargeRequest{BookingID: 1, Amount: 100, Currency: "VND", WebhookURL: "http://127.0.0.1:1/payments/webhook"}

// Failures of the gateway are retried under the same idempotency key.
func TestClientRetriesUnderOneKey(t *testing.T) {
	t.Parallel()
	g := &gatewayStub{script: []int{503, 502, 201}}
	c := newStub(t, g, payment.ClientOptions{})
	res, err := c.Charge(context.Background(), "k-1", chargeReq)
	if err != nil || res.ProviderTxnID != "txn-1" {
		t.Fatalf("Charge = %+v, %v", res, err)
	}
	if keys := g.hits(); len(keys) != 3 || keys[0] != "k-1" || keys[1] != "k-1" || keys[2] != "k-1" {
		t.Errorf("attempts carried %q, want k-1 three times", keys)
	}
}

// A refusal of the request itself is not retried, and is not an outage.
func TestClientDoesNotRetryARefusal(t *testing.T) {
	t.Parallel()
	g := &gatewayStub{script: []int{422}}
	c := newStub(t, g, payment.ClientOptions{TripAfter: 1})
	for range 3 {
		_, err := c.Charge(context.Background(), "k-2", chargeReq)
		if err == nil || fault.Is(err, fault.Overloaded) {
			t.Fatalf("Charge = %v, want a plain refusal", err)
		}
	}
	if n := len(g.hits()); n != 3 {
		t.Errorf("%d attempts, want 3 (one per call: refusals neither retry nor open the circuit)", n)
	}
}

// A gateway that keeps failing opens the circuit: calls then fail at once
// with 503 overloaded, without reaching it.
func TestClientCircuitOpensOnAGatewayThatIsDown(t *testing.T) {
	t.Parallel()
	g := &gatewayStub{script: []int{503}}
	c := newStub(t, g, payment.ClientOptions{Attempts: 2, TripAfter: 4, OpenFor: time.Hour})
	for i := range 2 {
		if _, err := c.Charge(context.Background(), "k-"+strconv.Itoa(i), chargeReq); !fault.Is(err, fault.Overloaded) {
			t.Fatalf("call %d: %v, want overloaded", i, err)
		}
	}
	if n := len(g.hits()); n != 4 {
		t.Fatalf("%d attempts before the circuit opened, want 4", n)
	}
	for i := range 50 {
		_, err := c.Charge(context.Background(), "k-open-"+strconv.Itoa(i), chargeReq)
		var fe *fault.Error
		if !fault.Is(err, fault.Overloaded) || !errors.As(err, &fe) || fe.RetryAfter <= 0 {
			t.Fatalf("call with the circuit open: %v, want overloaded with a retry delay", err)
		}
	}
	if n := len(g.hits()); n != 4 {
		t.Errorf("the gateway got %d attempts, want still 4: an open circuit does not call it", n)
	}
}

// A gateway that does not answer: every attempt is cut at its timeout, and
// the call gives up after its attempts.
func TestClientTimesOutAHangingGateway(t *testing.T) {
	t.Parallel()
	g := &gatewayStub{script: []int{201}, hang: true}
	c := newStub(t, g, payment.ClientOptions{AttemptTimeout: 50 * time.Millisecond, Attempts: 2})
	_, err := c.Refund(context.Background(), "r-1", payment.GatewayRefundRequest{ProviderTxnID: "t", BookingID: 1, Amount: 1, Currency: "VND"})
	if !fault.Is(err, fault.Overloaded) || !strings.Contains(err.Error(), "after 2 attempts") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Refund = %v, want overloaded after 2 attempts that timed out", err)
	}
	// How many reached the stub depends on scheduling; none got an answer.
	if n := len(g.hits()); n < 1 || n > 2 {
		t.Errorf("%d attempts reached the gateway, want 1 or 2", n)
	}

	// The caller's own deadline running out before the attempts do (a
	// request's bound) is the gateway's fault too, and says so: not the
	// database's busy-ness that a bare deadline would be read as.
	c = newStub(t, g, payment.ClientOptions{AttemptTimeout: time.Hour, Attempts: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.Charge(ctx, "k-deadline", chargeReq)
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.Overloaded || !strings.Contains(fe.Detail, "payment gateway") || fe.RetryAfter != 5*time.Second {
		t.Errorf("Charge past the caller's deadline = %v, want overloaded naming the payment gateway, Retry-After 5 s", err)
	}
	// A caller that went away is not answered at all: no fault.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err = c.Charge(ctx, "k-gone", chargeReq); fault.CodeOf(err) != "" || !errors.Is(err, context.Canceled) {
		t.Errorf("Charge of a caller that left = %v, want the cancellation, no fault", err)
	}
}
