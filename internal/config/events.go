package config

import "time"

// Events are the settings of the event machinery (outbox relay and
// consumers), in `berth serve` and `berth worker`.
type Events struct {
	KafkaTopic string // BERTH_KAFKA_TOPIC
	// InServe runs the relay and consumers inside `berth serve`; turn it
	// off when `berth worker` processes run them instead.
	InServe bool // BERTH_EVENTS_IN_SERVE
	// Retention is how long published events and processed-event records
	// are kept.
	Retention time.Duration // BERTH_EVENT_RETENTION
	// RefundData is the data of refund.* events: "booking" (the booking,
	// the refund in data.refund) or "refund" (the refund alone, the shape
	// of earlier releases, for a rolling upgrade from one).
	RefundData   string        // BERTH_REFUND_EVENT_DATA
	PollInterval time.Duration // BERTH_OUTBOX_POLL_INTERVAL
	// NotifyURL and CheckinURL receive signed webhooks (notifications;
	// check-in sync); unset, both are only logged. HookSecret (whsec_…)
	// signs them.
	NotifyURL  string // BERTH_NOTIFY_WEBHOOK_URL
	CheckinURL string // BERTH_CHECKIN_URL
	HookSecret string // BERTH_HOOK_SECRET
}
