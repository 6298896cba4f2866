package outbox

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Message is one outbox row on its way to the consumers.
type Message struct {
	Seq       int64  // the outbox row id: one booking's events in the order written
	EventID   string // the CloudEvents id, unique per event
	BookingID int64
	Type      string
	Payload   json.RawMessage
	Time      time.Time // when the change was made (server clock)
}

// Source is the CloudEvents source of every berth event.
const Source = "/berth/bookings"

// CloudEvent is the CloudEvents 1.0 structured JSON envelope of an event
// (docs/api.md, "Events"): what goes to Kafka as the record value.
type CloudEvent struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Type            string          `json:"type"`
	Source          string          `json:"source"`
	Time            time.Time       `json:"time"`
	Subject         string          `json:"subject"`
	DataContentType string          `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
}

// Envelope returns m as a CloudEvent. The subject is the booking id as a
// string.
func (m Message) Envelope() CloudEvent {
	return CloudEvent{
		SpecVersion:     "1.0",
		ID:              m.EventID,
		Type:            m.Type,
		Source:          Source,
		Time:            m.Time.UTC(),
		Subject:         strconv.FormatInt(m.BookingID, 10),
		DataContentType: "application/json",
		Data:            m.Payload,
	}
}

// MarshalEnvelope returns m's CloudEvent as JSON.
func (m Message) MarshalEnvelope() ([]byte, error) {
	b, err := json.Marshal(m.Envelope())
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", m.EventID, err)
	}
	return b, nil
}

// ParseEnvelope decodes a CloudEvent and checks the members berth relies
// on.
func ParseEnvelope(b []byte) (CloudEvent, error) {
	var ce CloudEvent
	if err := json.Unmarshal(b, &ce); err != nil {
		return ce, fmt.Errorf("decode cloud event: %w", err)
	}
	switch {
	case ce.SpecVersion != "1.0":
		return ce, fmt.Errorf("cloud event %q: specversion %q is not 1.0", ce.ID, ce.SpecVersion)
	case ce.ID == "" || ce.Type == "":
		return ce, fmt.Errorf("cloud event %q: id and type are required", ce.ID)
	}
	if _, err := ce.BookingID(); err != nil {
		return ce, err
	}
	return ce, nil
}

// BookingID returns the booking id the subject names.
func (ce CloudEvent) BookingID() (int64, error) {
	id, err := strconv.ParseInt(ce.Subject, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("cloud event %q: subject %q is not a booking id", ce.ID, ce.Subject)
	}
	return id, nil
}
