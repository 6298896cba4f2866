package payment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/internal/app/apptest"
	"berth.dev/berth/internal/config"
	berthevents "berth.dev/berth/internal/events"
	"berth.dev/berth/internal/payment"
	"berth.dev/berth/internal/payment/paytest"
)

func pay(s *apptest.Server, customer, id int64, key string) *apptest.Response {
	req := apptest.Request{Method: http.MethodPost, Path: path("/bookings/%d/payments", id), Token: s.Token("customer", customer)}
	if key != "" {
		req.Header = map[string]string{"Idempotency-Key": key}
	}
	return s.Do(req)
}

// Paying a held booking starts one charge at the gateway for the server's
// amount; the checkout page's "Pay" confirms it through the webhook.
func TestStartPaymentAndCheckout(t *testing.T) {
	t.Parallel()
	s, pool, flightID := startFlight(t)
	id := hold(t, s, 7, flightID, "10A", "10B")

	if r := pay(s, 7, id, ""); r.Status != http.StatusBadRequest || r.Code() != "invalid_request" {
		t.Errorf("without Idempotency-Key: %d %s, want 400 invalid_request", r.Status, r.Body)
	}
	first := pay(s, 7, id, "pay-1")
	if first.Status != http.StatusCreated {
		t.Fatalf("pay: %d %s", first.Status, first.Body)
	}
	var ch struct {
		PaymentID   int64  `json:"paymentId"`
		Status      string `json:"status"`
		CheckoutURL string `json:"checkoutUrl"`
	}
	first.JSON(t, &ch)
	if ch.PaymentID <= 0 || ch.Status != "PENDING" || !strings.HasPrefix(ch.CheckoutURL, s.URL+"/paysim/checkout/") {
		t.Fatalf("pay answered %s", first.Body)
	}
	again := pay(s, 7, id, "pay-1")
	if again.Status != http.StatusCreated || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("same key again: %d %s (replayed %q), want the first answer replayed", again.Status, again.Body,
			again.Header.Get("Idempotent-Replayed"))
	}
	resumed := pay(s, 7, id, "pay-2")
	if resumed.Status != http.StatusCreated || string(resumed.Body) != string(first.Body) {
		t.Errorf("another key for the same booking: %d %s, want the same charge %s", resumed.Status, resumed.Body, first.Body)
	}
	if st := s.App.PaySim.Stats(); st.Charges != 1 {
		t.Errorf("the gateway has %d charges, want 1", st.Charges)
	}
	var amount int64
	if err := pool.QueryRow(t.Context(), `SELECT amount FROM charge WHERE id = $1`, ch.PaymentID).Scan(&amount); err != nil || amount != 2*price {
		t.Errorf("charge amount %d (%v), want %d", amount, err, 2*price)
	}
	for _, c := range []struct {
		name string
		r    *apptest.Response
		want int
	}{
		{"another customer", pay(s, 8, id, "pay-x"), http.StatusNotFound},
		{"unknown booking", pay(s, 7, 999_999, "pay-y"), http.StatusNotFound},
		{"an admin", s.Do(apptest.Request{Method: http.MethodPost, Path: path("/bookings/%d/payments", id), Token: s.Token("admin", 1),
			Header: map[string]string{"Idempotency-Key": "pay-z"}}), http.StatusForbidden},
	} {
		if c.r.Status != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, c.r.Status, c.r.Body, c.want)
		}
	}

	// A person clicks Pay on the checkout page.
	page := apptest.Do(t, ch.CheckoutURL, apptest.Request{Method: http.MethodGet})
	if page.Status != http.StatusOK || !strings.Contains(string(page.Body), ">Pay<") || !strings.Contains(string(page.Body), "3,000,000 VND") ||
		!strings.Contains(string(page.Body), fmt.Sprintf(`href="%s/app/bookings/%d"`, s.URL, id)) {
		t.Fatalf("checkout page: %d %s", page.Status, page.Body)
	}
	if r := apptest.Do(t, ch.CheckoutURL+"/pay", apptest.Request{Method: http.MethodPost}); r.Status != http.StatusOK {
		t.Fatalf("click pay: %d %s", r.Status, r.Body)
	}
	if err := s.App.PaySim.Idle(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b := getBooking(t, pool, id); b.Status != "CONFIRMED" {
		t.Fatalf("booking %s after paying, want CONFIRMED", b.Status)
	}
	if r := pay(s, 7, id, "pay-3"); r.Status != http.StatusConflict || r.Code() != "invalid_state" {
		t.Errorf("paying a confirmed booking: %d %s, want 409 invalid_state", r.Status, r.Body)
	}

	// Expired, swept and cancelled holds cannot be paid.
	late := hold(t, s, 7, flightID, "11A")
	cancelled := hold(t, s, 7, flightID, "11B")
	if r := s.Do(apptest.Request{Method: http.MethodDelete, Path: path("/bookings/%d", cancelled), Token: s.Token("customer", 7)}); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	if r := pay(s, 7, cancelled, "pay-4"); r.Status != http.StatusConflict || r.Code() != "invalid_state" {
		t.Errorf("paying a cancelled booking: %d %s, want 409 invalid_state", r.Status, r.Body)
	}
	s.Clock.Advance(10 * time.Minute)
	if r := pay(s, 7, late, "pay-5"); r.Status != http.StatusConflict || r.Code() != "hold_expired" {
		t.Errorf("paying an expired hold: %d %s, want 409 hold_expired", r.Status, r.Body)
	}
	settle(t, s, nil)
	if r := pay(s, 7, late, "pay-6"); r.Status != http.StatusConflict || r.Code() != "hold_expired" {
		t.Errorf("paying a swept hold: %d %s, want 409 hold_expired", r.Status, r.Body)
	}
	mustAudit(t, s)
}

// fakeGateway is a hand-written gateway for tests: it answers charges and
// refunds, and can be down, slow, or send a webhook before it answers.
type fakeGateway struct {
	t       *testing.T
	down    atomic.Bool
	hits    atomic.Int64
	mu      sync.Mutex
	keys    []string
	block   chan struct{} // when set, requests wait for it to close
	arrived chan struct{} // signalled when a request arrives
	// beforeRefund runs before a refund is answered.
	beforeRefund func(req payment.GatewayRefundRequest, refundID string)
}

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.hits.Add(1)
	g.mu.Lock()
	g.keys = append(g.keys, r.Header.Get("Idempotency-Key"))
	block, arrived := g.block, g.arrived
	g.mu.Unlock()
	if arrived != nil {
		select {
		case arrived <- struct{}{}:
		default:
		}
	}
	if block != nil {
		<-block
	}
	if g.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/charges":
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"providerTxnId": "txn-%s", "checkoutUrl": "https://gateway.invalid/c/%s"}`,
			r.Header.Get("Idempotency-Key"), r.Header.Get("Idempotency-Key"))
	case "/refunds":
		var req payment.GatewayRefundRequest
		if err := json.Unmarshal(body, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id := "rf-" + r.Header.Get("Idempotency-Key")
		if g.beforeRefund != nil {
			g.beforeRefund(req, id)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"refundId": %q}`, id)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (g *fakeGateway) seenKeys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.keys...)
}

func startWithGateway(t *testing.T, g *fakeGateway) *apptest.Server {
	t.Helper()
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return start(t, func(c *config.Config) { c.GatewayURL, c.PaySim = srv.URL, false })
}

// A gateway that is down: 503 overloaded with Retry-After, every attempt
// under one gateway key, and the answer is not stored, so the customer's
// retry with the same Idempotency-Key runs again and succeeds once the
// gateway is back.
func TestPaymentWhileGatewayDown(t *testing.T) {
	t.Parallel()
	g := &fakeGateway{t: t}
	g.down.Store(true)
	s := startWithGateway(t, g)
	flightID := newFlight(t, s)
	id := hold(t, s, 7, flightID, "10A")
	r := pay(s, 7, id, "k1")
	if r.Status != http.StatusServiceUnavailable || r.Code() != "overloaded" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("gateway down: %d %s (Retry-After %q), want 503 overloaded with Retry-After", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	keys := g.seenKeys()
	if len(keys) != 3 {
		t.Fatalf("gateway saw %d attempts, want 3", len(keys))
	}
	for _, k := range keys {
		if k != keys[0] || k == "" {
			t.Fatalf("attempts carried keys %q, want one key", keys)
		}
	}
	g.down.Store(false)
	r = pay(s, 7, id, "k1")
	if r.Status != http.StatusCreated {
		t.Fatalf("gateway back, same key: %d %s, want 201", r.Status, r.Body)
	}
	if got := g.seenKeys(); got[len(got)-1] != keys[0] {
		t.Errorf("the resumed charge used gateway key %q, want the first attempts' %q", got[len(got)-1], keys[0])
	}
	if !strings.Contains(string(r.Body), "https://gateway.invalid/c/"+keys[0]) {
		t.Errorf("answer %s does not carry the gateway's charge", r.Body)
	}
}

// A slow gateway: a second request with the same key while the first is
// still running gets 409 idempotency_key_in_use, never a second charge;
// after the first finishes, the same key replays its answer.
func TestSameKeyWhileFirstRunning(t *testing.T) {
	t.Parallel()
	s, g, id, firstc := stalledPayment(t, "slow")
	g.mu.Lock()
	close(g.block)
	g.block = nil
	g.mu.Unlock()
	first := <-firstc
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	again := pay(s, 7, id, "slow")
	if again.Status != http.StatusCreated || string(again.Body) != string(first.Body) {
		t.Errorf("after it finished: %d %s, want the first answer %s", again.Status, again.Body, first.Body)
	}
	if n := g.hits.Load(); n != 1 {
		t.Errorf("gateway called %d times, want 1", n)
	}
}

// stalledPayment starts the payment of a new hold under key at a gateway
// that holds it until g.block is closed, and checks that a repeat under the
// key meanwhile is 409 idempotency_key_in_use with Retry-After. The first
// request's answer comes on firstc.
func stalledPayment(t *testing.T, key string) (s *apptest.Server, g *fakeGateway, id int64, firstc chan *apptest.Response) {
	t.Helper()
	g = &fakeGateway{t: t, block: make(chan struct{}), arrived: make(chan struct{}, 1)}
	s = startWithGateway(t, g)
	id = hold(t, s, 7, newFlight(t, s), "10A")
	firstc = make(chan *apptest.Response, 1)
	go func() { firstc <- pay(s, 7, id, key) }()
	<-g.arrived
	if r := pay(s, 7, id, key); r.Status != http.StatusConflict || r.Code() != "idempotency_key_in_use" || r.Header.Get("Retry-After") == "" {
		t.Errorf("same key while the first runs: %d %s, want 409 idempotency_key_in_use with Retry-After", r.Status, r.Body)
	}
	return s, g, id, firstc
}

// A refund.succeeded webhook that arrives before berth has stored the
// gateway's answer to its refund request still completes the refund.
func TestRefundWebhookBeforeGatewayAnswer(t *testing.T) {
	t.Parallel()
	g := &fakeGateway{t: t}
	s := startWithGateway(t, g)
	pool := s.App.Pool
	// Buffered and never blocking: an in-process refunds consumer may ask
	// too, under the same key.
	early := make(chan int, 10)
	g.beforeRefund = func(req payment.GatewayRefundRequest, refundID string) {
		r := paytest.Send(t, s.URL, s.Clock.Now(), payment.RefundSucceeded, payment.WebhookData{
			BookingID: req.BookingID, ProviderTxnID: refundID, Amount: req.Amount, Currency: req.Currency,
		})
		select {
		case early <- r.Status:
		default:
		}
	}
	flightID := newFlight(t, s)
	id := hold(t, s, 7, flightID, "10A")
	s.Clock.Advance(11 * time.Minute)
	d := paytest.Pay(t, s, id) // late: refunded
	relay := &paytest.Relay{Pool: pool, Consumer: s.App.Refunds}
	if n, errs := relay.Drain(t.Context()); n != 1 || len(errs) != 0 {
		t.Fatalf("drain: %d processed, errors %v", n, errs)
	}
	if st := <-early; st != http.StatusOK {
		t.Errorf("early refund webhook: %d, want 200", st)
	}
	var status string
	if err := pool.QueryRow(t.Context(), `SELECT r.status FROM refund r JOIN payment p ON p.id = r.payment_id
		WHERE p.provider_txn_id = $1`, d.ProviderTxnID).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "SUCCEEDED" {
		t.Errorf("refund %s, want SUCCEEDED", status)
	}
	if n := events(t, pool, id, "refund.completed"); n != 1 {
		t.Errorf("%d refund.completed events, want 1", n)
	}
	settle(t, s, relay)
	mustAudit(t, s)
}

// A refund.succeeded for other money than the refund berth asked for
// (a partial refund, another currency) completes nothing, whether it
// comes before berth has stored the gateway's answer or after; the
// gateway's right report completes the refund once, whether it came
// before the wrong one, after it, or after the link.
func TestRefundReportedForOtherMoneyCompletesNothing(t *testing.T) {
	t.Parallel()
	type report struct {
		minus    int64 // taken off the refund's amount
		currency string
	}
	wrong, otherCurrency, right := report{1, "VND"}, report{0, "USD"}, report{0, "VND"}
	for name, c := range map[string]struct {
		early, late []report // before berth stores the gateway's id; after
		done        bool     // SUCCEEDED once all came
	}{
		"wrong early, right late":  {early: []report{otherCurrency}, late: []report{right}, done: true},
		"wrong late, right late":   {late: []report{wrong, otherCurrency, right}, done: true},
		"wrong early, right early": {early: []report{wrong, right}, done: true},
		"right early, wrong early": {early: []report{right, otherCurrency}, done: true},
		"only wrong":               {early: []report{wrong}, late: []report{otherCurrency}, done: false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := &fakeGateway{t: t}
			s := startWithGateway(t, g)
			pool := s.App.Pool
			send := func(gatewayID string, amount int64, rp report) {
				t.Helper()
				if r := paytest.Send(t, s.URL, s.Clock.Now(), payment.RefundSucceeded, payment.WebhookData{
					ProviderTxnID: gatewayID, Amount: amount - rp.minus, Currency: rp.currency}); r.Status != http.StatusOK {
					t.Errorf("refund webhook: %d %s, want 200", r.Status, r.Body)
				}
			}
			var once sync.Once
			g.beforeRefund = func(req payment.GatewayRefundRequest, refundID string) {
				once.Do(func() {
					for _, rp := range c.early {
						send(refundID, req.Amount, rp)
					}
				})
			}
			flightID := newFlight(t, s)
			id := hold(t, s, 7, flightID, "10A")
			s.Clock.Advance(11 * time.Minute)
			d := paytest.Pay(t, s, id) // late: refunded in full
			relay := &paytest.Relay{Pool: pool, Consumer: s.App.Refunds}
			if n, errs := relay.Drain(t.Context()); n != 1 || len(errs) != 0 {
				t.Fatalf("drain: %d processed, errors %v", n, errs)
			}
			var gatewayID, status string
			refund := func() string {
				t.Helper()
				if err := pool.QueryRow(t.Context(), `SELECT r.status, coalesce(r.gateway_refund_id, '') FROM refund r
					JOIN payment p ON p.id = r.payment_id WHERE p.provider_txn_id = $1`, d.ProviderTxnID).Scan(&status, &gatewayID); err != nil {
					t.Fatal(err)
				}
				return status
			}
			apptest.Eventually(t, 10*time.Second, "the refund is linked to the gateway's id", func() bool {
				refund()
				return gatewayID != ""
			})
			for _, rp := range c.late {
				if rp == right && refund() != "REQUESTED" {
					t.Fatalf("refund before the right report: %s, want REQUESTED", status)
				}
				send(gatewayID, price, rp)
			}
			want, completed := "REQUESTED", 0
			if c.done {
				want, completed = "SUCCEEDED", 1
			}
			if st := refund(); st != want {
				t.Errorf("refund after every report: %s, want %s", st, want)
			}
			if n := events(t, pool, id, "refund.completed"); n != completed {
				t.Errorf("%d refund.completed events, want %d", n, completed)
			}
			settle(t, s, relay)
			mustAudit(t, s)
		})
	}
}

// handleOnly is a consumer as the event relay sees it: Handle, and nothing
// the refunds consumer does after its transaction.
type handleOnly struct{ berthevents.Consumer }

// A gateway that hangs holds up no event: the refunds consumer records the
// refund in the relay's transaction without calling the gateway, and the
// refund is sent afterwards, outside any transaction, once the gateway
// answers.
func TestRefundConsumerDoesNotWaitForGateway(t *testing.T) {
	t.Parallel()
	g := &fakeGateway{t: t}
	s := startWithGateway(t, g)
	pool := s.App.Pool
	flightID := newFlight(t, s)
	id := hold(t, s, 7, flightID, "10A")
	s.Clock.Advance(11 * time.Minute)
	paytest.Pay(t, s, id) // late: refunded

	block := make(chan struct{})
	g.mu.Lock()
	g.block = block
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	relay := &paytest.Relay{Pool: pool, Consumer: handleOnly{s.App.Refunds}}
	if n, errs := relay.Drain(ctx); n != 1 || len(errs) != 0 {
		t.Errorf("refund event while the gateway hangs: %d processed, errors %v; want it handled at once", n, errs)
	}
	if n := count(t, pool, `SELECT count(*) FROM refund WHERE booking_id = $1 AND status = 'REQUESTED'`, id); n != 1 {
		t.Errorf("%d refunds recorded, want 1", n)
	}

	g.mu.Lock()
	g.block = nil
	g.mu.Unlock()
	close(block)
	if _, errs := (&paytest.Relay{Pool: pool, Consumer: s.App.Refunds}).Drain(t.Context()); len(errs) != 0 {
		t.Fatalf("send: %v", errs)
	}
	if n := count(t, pool, `SELECT count(*) FROM refund WHERE booking_id = $1 AND gateway_refund_id IS NOT NULL`, id); n != 1 {
		t.Errorf("refund not sent to the gateway once it answered")
	}
}

// A payment start whose process died keeps its Idempotency-Key only for
// its short lease, not a minute: a payment start resumes its booking's
// one charge, so the retry may run it again. Its process dying is
// simulated by a first request stalled at the gateway while the server's
// clock moves past its lease, as it would for a request that died there.
// While it runs within its lease, a repeat is still 409; once taken over,
// both answers are the one charge, under one gateway key.
func TestSameKeyAfterItsHolderDied(t *testing.T) {
	t.Parallel()
	s, g, id, firstc := stalledPayment(t, "dies")
	// The first is "dead": stalled at the gateway past its lease. The
	// gateway answers the retry.
	g.mu.Lock()
	stalled := g.block
	g.block = nil
	g.mu.Unlock()
	s.Clock.Advance(30 * time.Second)
	retry := pay(s, 7, id, "dies")
	close(stalled)
	first := <-firstc
	if retry.Status != http.StatusCreated {
		t.Fatalf("same key 30 s after its holder died: %d %s, want 201", retry.Status, retry.Body)
	}
	if first.Status != http.StatusCreated || string(first.Body) != string(retry.Body) {
		t.Errorf("the stalled first: %d %s, want the retry's charge %s", first.Status, first.Body, retry.Body)
	}
	again := pay(s, 7, id, "dies")
	if again.Status != http.StatusCreated || string(again.Body) != string(retry.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("same key after both: %d %s (replayed %q), want the retry's answer replayed", again.Status, again.Body,
			again.Header.Get("Idempotent-Replayed"))
	}
	keys := g.seenKeys()
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Errorf("gateway keys %q, want the same key twice", keys)
	}
	if n := count(t, s.App.Pool, `SELECT count(*) FROM charge WHERE booking_id = $1`, id); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}
