package config

import (
	"flag"
	"fmt"
	"strconv"
	"time"
)

// Events are the settings of the event machinery (outbox relay and
// consumers), in `berth serve` and `berth worker`.
type Events struct {
	KafkaTopic string // BERTH_KAFKA_TOPIC
	// InServe runs the relay and consumers inside `berth serve`; turn it
	// off when `berth worker` processes run them instead.
	InServe bool // BERTH_EVENTS_IN_SERVE
	// Retention is how long published events and processed-event records
	// are kept.
	Retention    time.Duration // BERTH_EVENT_RETENTION
	PollInterval time.Duration // BERTH_OUTBOX_POLL_INTERVAL
	// NotifyURL and CheckinURL receive signed webhooks (notifications;
	// check-in sync); unset, both are only logged. HookSecret (whsec_…)
	// signs them.
	NotifyURL  string // BERTH_NOTIFY_WEBHOOK_URL
	CheckinURL string // BERTH_CHECKIN_URL
	HookSecret string // BERTH_HOOK_SECRET
}

func defaultEvents() Events {
	return Events{KafkaTopic: "booking-events", InServe: true, Retention: 7 * 24 * time.Hour, PollInterval: time.Second}
}

func (e *Events) fromEnv(getenv func(string) string) error {
	for name, dst := range map[string]*string{
		"BERTH_KAFKA_TOPIC": &e.KafkaTopic, "BERTH_NOTIFY_WEBHOOK_URL": &e.NotifyURL,
		"BERTH_CHECKIN_URL": &e.CheckinURL, "BERTH_HOOK_SECRET": &e.HookSecret,
	} {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	if err := envVars(getenv, map[string]*time.Duration{"BERTH_EVENT_RETENTION": &e.Retention, "BERTH_OUTBOX_POLL_INTERVAL": &e.PollInterval},
		time.ParseDuration, "a duration like 168h"); err != nil {
		return err
	}
	if v := getenv("BERTH_EVENTS_IN_SERVE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("BERTH_EVENTS_IN_SERVE: %q is not true or false", v)
		}
		e.InServe = b
	}
	return nil
}

func (e *Events) flags(fs *flag.FlagSet) {
	fs.StringVar(&e.KafkaTopic, "kafka-topic", e.KafkaTopic, "Kafka topic of booking events (BERTH_KAFKA_TOPIC)")
	fs.BoolVar(&e.InServe, "events-in-serve", e.InServe, "run the outbox relay and consumers in serve (BERTH_EVENTS_IN_SERVE)")
	fs.DurationVar(&e.Retention, "event-retention", e.Retention, "keep published events and processed-event records this long (BERTH_EVENT_RETENTION)")
	fs.DurationVar(&e.PollInterval, "outbox-poll-interval", e.PollInterval, "relay polling period besides LISTEN/NOTIFY (BERTH_OUTBOX_POLL_INTERVAL)")
	fs.StringVar(&e.NotifyURL, "notify-webhook-url", e.NotifyURL, "notification webhook URL (BERTH_NOTIFY_WEBHOOK_URL)")
	fs.StringVar(&e.CheckinURL, "checkin-url", e.CheckinURL, "check-in sync URL (BERTH_CHECKIN_URL)")
}

func (e *Events) validate() []error {
	var errs []error
	bad := func(name, format string, args ...any) { errs = append(errs, fmt.Errorf(name+": "+format, args...)) }
	if e.KafkaTopic == "" {
		bad("BERTH_KAFKA_TOPIC", "must not be empty")
	}
	if e.Retention < time.Hour {
		bad("BERTH_EVENT_RETENTION", "%s must be at least 1h", e.Retention)
	}
	if e.PollInterval < 10*time.Millisecond || e.PollInterval > time.Minute {
		bad("BERTH_OUTBOX_POLL_INTERVAL", "%s must be between 10ms and 1m", e.PollInterval)
	}
	for name, u := range map[string]string{"BERTH_NOTIFY_WEBHOOK_URL": e.NotifyURL, "BERTH_CHECKIN_URL": e.CheckinURL} {
		if u != "" && !isURL(u, "http", "https") {
			bad(name, "must be an http(s):// URL")
		}
	}
	if e.NotifyURL != "" || e.CheckinURL != "" {
		if _, err := WebhookKey(e.HookSecret); err != nil {
			bad("BERTH_HOOK_SECRET", "%v (it signs the notification and check-in webhooks)", err)
		}
	}
	return errs
}
