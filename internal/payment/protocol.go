package payment

import "context"

// ChargeRequest asks the gateway to charge a booking (POST /charges).
type ChargeRequest struct {
	BookingID  int64  `json:"bookingId"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	WebhookURL string `json:"webhookUrl"`
}

// ChargeResult is the gateway's answer to a charge: the outcome comes later
// by webhook.
type ChargeResult struct {
	ProviderTxnID string `json:"providerTxnId"`
	CheckoutURL   string `json:"checkoutUrl"`
}

// GatewayRefundRequest is the body of the gateway protocol's POST /refunds:
// it asks the gateway to give back (part of) a charge.
type GatewayRefundRequest struct {
	ProviderTxnID string `json:"providerTxnId"`
	BookingID     int64  `json:"bookingId"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	WebhookURL    string `json:"webhookUrl"`
}

// RefundResult is the gateway's answer to a refund request.
type RefundResult struct {
	RefundID string `json:"refundId"`
}

// Gateway is the payment provider. Both calls carry an idempotency key: the
// same key always means the same charge or refund, however often it is
// sent. Errors the caller may act on are fault errors (fault.Overloaded when
// the gateway is unreachable or its circuit is open).
type Gateway interface {
	Charge(ctx context.Context, key string, r ChargeRequest) (ChargeResult, error)
	Refund(ctx context.Context, key string, r GatewayRefundRequest) (RefundResult, error)
}

// Webhook event types (docs/api.md, "Payment gateway webhook").
const (
	ChargeSucceeded = "charge.succeeded"
	ChargeFailed    = "charge.failed"
	RefundSucceeded = "refund.succeeded"
)

// Webhook is the body of a webhook delivery.
type Webhook struct {
	Type string      `json:"type"`
	Data WebhookData `json:"data"`
}

// WebhookData is what a webhook reports. For refund.succeeded,
// ProviderTxnID is the gateway's refund id.
type WebhookData struct {
	BookingID     int64  `json:"bookingId"`
	ProviderTxnID string `json:"providerTxnId"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
}
