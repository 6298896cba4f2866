// Package payment takes money for held bookings and gives it back, without
// ever confirming what should not be confirmed or losing a cent.
//
// A customer's payment request starts a charge at the gateway (one per
// booking, resumed on repeat, never inside a database transaction). The
// gateway's signed webhook reports the outcome: a charge.succeeded confirms
// the booking through booking.Lifecycle.Confirm in the same transaction that
// records the money, or, when the booking cannot be confirmed (late, wrong
// amount or currency, unknown booking, seat gone, already confirmed), the
// money is recorded and a refund requested. Every step is idempotent on a
// UNIQUE constraint: the provider's transaction id for webhooks, the
// outbox event id for refunds.
//
// Refunds are a consumer of refund.requested events (Refunds): it asks the
// gateway to refund with an idempotency key derived from the event, and the
// refund.succeeded webhook completes it.
//
// The gateway is an interface; Client speaks the HTTP protocol of docs/api.md
// with timeouts, retries under one idempotency key and a circuit breaker,
// and paysim is a simulator that speaks it too.
package payment
