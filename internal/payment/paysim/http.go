package paysim

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"berth.dev/berth/internal/payment"
)

// Handler serves the checkout pages (GET /checkout/{txn}, POST
// /checkout/{txn}/pay and /fail) and, unless the simulator is in process,
// the gateway protocol (POST /charges, POST /refunds) and an index of
// recent charges (GET /).
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	s.checkoutRoutes(mux)
	if s.options().InProcess {
		return mux
	}
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		var req payment.ChargeRequest
		key, ok := s.apiCall(w, r, &req)
		if !ok {
			return
		}
		if req.Amount < 0 || req.WebhookURL == "" || len(req.WebhookURL) > maxURL || len(req.Currency) != 3 {
			apiError(w, http.StatusUnprocessableEntity, "amount must not be negative, currency is a 3-letter code and webhookUrl (at most 2048 bytes) is required")
			return
		}
		res, _ := s.Charge(r.Context(), key, req)
		writeJSON(w, http.StatusCreated, res)
	})
	mux.HandleFunc("POST /refunds", func(w http.ResponseWriter, r *http.Request) {
		var req payment.GatewayRefundRequest
		key, ok := s.apiCall(w, r, &req)
		if !ok {
			return
		}
		if req.Amount <= 0 || req.ProviderTxnID == "" || len(req.ProviderTxnID) > 255 || req.WebhookURL == "" || len(req.WebhookURL) > maxURL {
			apiError(w, http.StatusUnprocessableEntity, "amount must be positive; providerTxnId and webhookUrl are required")
			return
		}
		res, _ := s.Refund(r.Context(), key, req)
		writeJSON(w, http.StatusCreated, res)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		s.index(w)
	})
	return mux
}

func (s *Sim) checkoutRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /checkout/{txn}", func(w http.ResponseWriter, r *http.Request) {
		s.page(w, r, r.PathValue("txn"), "")
	})
	mux.HandleFunc("POST /checkout/{txn}/{action}", func(w http.ResponseWriter, r *http.Request) {
		txn, action := r.PathValue("txn"), r.PathValue("action")
		if action != "pay" && action != "fail" {
			// As for an unknown charge.
			notFound(w, r, map[string]any{"Found": false, "Txn": txn})
			return
		}
		msg := "This charge was already decided."
		if s.Settle(txn, action == "pay") {
			msg = "Payment succeeded: berth will confirm the booking."
			if action == "fail" {
				msg = "Payment failed: berth will release the hold."
			}
		}
		s.page(w, r, txn, msg)
	})
}

// maxURL bounds a webhook URL, so that a charge's memory is small.
const maxURL = 2048

// apiCall applies the latency and error knobs and decodes a protocol call.
func (s *Sim) apiCall(w http.ResponseWriter, r *http.Request, dst any) (string, bool) {
	o := s.options()
	if d := jitter(o.Latency); d > 0 {
		select {
		case <-r.Context().Done():
			return "", false
		case <-time.After(d):
		}
	}
	if o.ErrorShare > 0 && rand.Float64() < o.ErrorShare {
		w.Header().Set("Retry-After", "0")
		apiError(w, http.StatusServiceUnavailable, "simulated outage")
		return "", false
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		apiError(w, http.StatusBadRequest, "the Idempotency-Key header is required")
		return "", false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		apiError(w, http.StatusBadRequest, "cannot read the body")
		return "", false
	}
	if err := json.Unmarshal(body, dst); err != nil {
		apiError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return "", false
	}
	return key, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

var pageTmpl = template.Must(template.New("checkout").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>paysim checkout</title>
<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}
.amount{font-size:2rem;margin:1rem 0}button{font-size:1.1rem;padding:.6rem 1.4rem;margin-right:.8rem;cursor:pointer}
.pay{background:#1f7a3a;color:#fff;border:0}.fail{background:#b3261e;color:#fff;border:0}
.note{padding:.8rem;background:#eef;border-radius:.3rem}.inline{display:inline}table{border-collapse:collapse}td,th{padding:.2rem .6rem;text-align:left}</style>
</head><body>
<h1>paysim checkout</h1>
{{if .Found}}
<p>Booking <b>{{.BookingID}}</b>, transaction <code>{{.Txn}}</code></p>
<p class="amount">{{.Amount}}</p>
{{if .Message}}<p class="note" role="status">{{.Message}}</p>{{end}}
{{if .Pending}}
<form method="post" action="{{.Txn}}/pay" class="inline"><button class="pay">Pay</button></form>
<form method="post" action="{{.Txn}}/fail" class="inline"><button class="fail">Fail</button></form>
{{else}}<p>Status: <b>{{.State}}</b></p>{{end}}
{{if .Back}}<p><a data-back href="{{.Back}}">Back to your booking</a></p>{{end}}
{{else}}<p>No such charge.</p>{{end}}
</body></html>`))

func (s *Sim) page(w http.ResponseWriter, r *http.Request, txn, msg string) {
	s.mu.Lock()
	c, found := s.charges[txn]
	data := map[string]any{"Found": found, "Txn": txn, "Message": msg}
	if found {
		data["BookingID"], data["Amount"] = c.req.BookingID, formatAmount(c.req.Amount, c.req.Currency)
		data["Pending"], data["State"] = c.state == pending, chargeStatus(c, s.stats.RefundedAmount[c.txn])
		data["Back"] = bookingPage(c.req.WebhookURL, c.req.BookingID)
	}
	s.mu.Unlock()
	if !found {
		notFound(w, r, data)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = pageTmpl.Execute(w, data)
}

// notFound answers a checkout page that does not exist: the page saying
// so to a browser (which asks for text/html), else a problem document
// (RFC 9457), as every other error a program gets from berth.
func notFound(w http.ResponseWriter, r *http.Request, data map[string]any) {
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_ = pageTmpl.Execute(w, data)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "https://berth.dev/problems/not_found", "title": "Not Found",
		"status": http.StatusNotFound, "detail": fmt.Sprintf("no charge %q", data["Txn"]), "code": "not_found"})
}

var indexTmpl = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>paysim</title>
<style>body{font-family:system-ui,sans-serif;max-width:48rem;margin:3rem auto;padding:0 1rem}td,th{padding:.2rem .6rem;text-align:left}</style>
</head><body><h1>paysim</h1>
<p>{{.Stats.Charges}} charges ({{.Stats.Succeeded}} succeeded, {{.Stats.Failed}} failed, {{.Stats.Pending}} pending),
{{.Stats.Refunds}} refunds, {{.Stats.Deliveries}} webhook deliveries.</p>
<table><tr><th>transaction</th><th>booking</th><th>amount</th><th>status</th></tr>
{{range .Recent}}<tr><td><a href="checkout/{{.Txn}}">{{.Txn}}</a></td><td>{{.BookingID}}</td><td>{{.Amount}}</td><td>{{.State}}</td></tr>
{{end}}</table></body></html>`))

func (s *Sim) index(w http.ResponseWriter) {
	st := s.Stats()
	type row struct {
		Txn, Amount, State string
		BookingID          int64
	}
	var recent []row
	s.mu.Lock()
	for i := len(s.order) - 1; i >= 0 && len(recent) < 50; i-- {
		c := s.charges[s.order[i]]
		recent = append(recent, row{Txn: c.txn, BookingID: c.req.BookingID, Amount: formatAmount(c.req.Amount, c.req.Currency),
			State: chargeStatus(c, s.stats.RefundedAmount[c.txn])})
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = indexTmpl.Execute(w, map[string]any{"Stats": st, "Recent": recent})
}
