package config

import (
	"strings"
	"testing"
	"time"
)

func TestEventSettings(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, env(valid))
	if err != nil {
		t.Fatal(err)
	}
	if c.Events != Defaults().Events || c.Events.KafkaTopic != "booking-events" || !c.Events.InServe {
		t.Errorf("defaults: %+v", c.Events)
	}
	m := with("BERTH_KAFKA_TOPIC", "bookings-v2")
	m["BERTH_EVENTS_IN_SERVE"] = "false"
	m["BERTH_EVENT_RETENTION"] = "48h"
	m["BERTH_NOTIFY_WEBHOOK_URL"] = "http://127.0.0.1:9999/notify"
	m["BERTH_HOOK_SECRET"] = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM="
	c, err = Load([]string{"--event-retention", "72h"}, env(m))
	if err != nil {
		t.Fatal(err)
	}
	if c.Events.KafkaTopic != "bookings-v2" || c.Events.InServe || c.Events.Retention != 72*time.Hour || c.Events.NotifyURL == "" {
		t.Errorf("env and flags not applied: %+v", c.Events)
	}

	tests := []struct{ key, value, want string }{
		{"BERTH_EVENT_RETENTION", "1m", "BERTH_EVENT_RETENTION"},
		{"BERTH_EVENT_RETENTION", "a week", "BERTH_EVENT_RETENTION"},
		{"BERTH_OUTBOX_POLL_INTERVAL", "1h", "BERTH_OUTBOX_POLL_INTERVAL"},
		{"BERTH_EVENTS_IN_SERVE", "maybe", "BERTH_EVENTS_IN_SERVE"},
		{"BERTH_CHECKIN_URL", "ftp://x", "BERTH_CHECKIN_URL"},
		// A hook URL needs a secret to sign with.
		{"BERTH_CHECKIN_URL", "http://127.0.0.1:1/checkin", "BERTH_HOOK_SECRET"},
	}
	for _, tt := range tests {
		_, err := Load(nil, env(with(tt.key, tt.value)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s=%q: error %v, want one naming %s", tt.key, tt.value, err, tt.want)
		}
	}
}
