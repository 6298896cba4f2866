package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka publishes events to a Kafka topic: key = booking id, so that one
// booking's events share a partition and stay in order; value = the
// CloudEvents JSON envelope; the event id also in the ce_id header.
//
// The producer is idempotent (franz-go's default) and waits for all
// in-sync replicas. It may cancel records already sent when a publish
// times out, so that a relay pass never hangs on a dead broker: such a
// record can then reach the topic twice, which at-least-once delivery
// allows and consumers deduplicate. franz-go fails every later record of a
// partition with the one that failed, so a booking's events never land out
// of order.
type Kafka struct {
	client *kgo.Client
	topic  string
}

// NewKafka connects a producer to brokers for topic. extra options come
// after berth's (tests shorten timeouts with them). Close it when done.
func NewKafka(brokers []string, topic string, timeout time.Duration, extra ...kgo.Opt) (*Kafka, error) {
	if topic == "" {
		return nil, errors.New("kafka producer: no topic") // BERTH_KAFKA_TOPIC has the default
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID("berth-relay"),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(timeout),
		kgo.AllowIdempotentProduceCancellation(),
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return &Kafka{client: cl, topic: topic}, nil
}

// Record returns the Kafka record of m.
func Record(topic string, m Message) (*kgo.Record, error) {
	value, err := m.MarshalEnvelope()
	if err != nil {
		return nil, err
	}
	return &kgo.Record{
		Topic: topic,
		Key:   []byte(strconv.FormatInt(m.BookingID, 10)),
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: "ce_id", Value: []byte(m.EventID)},
			{Key: "ce_type", Value: []byte(m.Type)},
			{Key: "content-type", Value: []byte("application/cloudevents+json; charset=UTF-8")},
		},
	}, nil
}

// Publish produces msgs and waits until the brokers acknowledged all of
// them, or one failed.
func (k *Kafka) Publish(ctx context.Context, msgs []Message) error {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		r, err := Record(k.topic, m)
		if err != nil {
			return err
		}
		recs[i] = r
	}
	if err := k.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce to %s: %w", k.topic, err)
	}
	return nil
}

// Ping checks that a broker answers.
func (k *Kafka) Ping(ctx context.Context) error { return k.client.Ping(ctx) }

// Close flushes nothing (every Publish waited for its records) and closes
// the connections.
func (k *Kafka) Close() { k.client.Close() }
