package httpapi

import (
	"net/http"

	"berth.dev/berth/internal/auth"
)

func (s *Server) startPayment(w http.ResponseWriter, r *http.Request, c auth.Caller) error {
	id, err := pathID(r, "booking")
	if err != nil {
		return err
	}
	ch, err := s.Payments.StartCharge(r.Context(), c, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, ch)
	return nil
}

// paymentWebhook answers 200 to every validly signed delivery it
// processed, duplicates included; 401 to a bad signature; 5xx (the gateway
// retries) when processing failed.
func (s *Server) paymentWebhook(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	if err := s.Payments.HandleWebhook(r.Context(), r.Header, body); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]bool{"received": true})
	return nil
}
